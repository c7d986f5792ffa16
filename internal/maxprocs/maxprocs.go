// Package maxprocs gives the process one P (one thread running Go code at
// a time) unless GOMAXPROCS is set in the environment. A blank import of it
// from package main is all it takes.
//
// One P, because tpsmon's work is small and steady: with more, every
// wakeup hands goroutines between threads, which costs more CPU than the
// work (docs/design.md §9). In an initialiser, because the runtime starts
// with a P per core and the other packages' initialisers then spread
// their allocations and threads over them: the same call from main left
// `tpsmon version` at 32-34 ms of CPU, and from here, before those
// initialisers run, at 23 (bench/HISTORY.md, round 8). It imports only
// runtime and syscall so that it is among the first packages initialised.
package maxprocs

import (
	"runtime"
	"syscall"
)

func init() {
	if v, _ := syscall.Getenv("GOMAXPROCS"); v == "" { // the runtime takes empty as unset too
		runtime.GOMAXPROCS(1)
	}
}
