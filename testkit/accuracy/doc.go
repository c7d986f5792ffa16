// Package accuracy holds tpsmon's end-to-end accuracy tests: the tpsmon
// binary, replaying recordings of real inference servers and watching a
// real llama-server live, against what the servers' clients saw arrive.
package accuracy
