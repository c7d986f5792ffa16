package tpsmonbin

import (
	"os/exec"
	"testing"
)

// Install copies the executable src to dst (mode 0755). The copy is made
// by a child process (install(1)), never through a file this process holds open for writing: a child that a parallel test
// forks meanwhile inherits such a descriptor, and running the copy then
// fails with "text file busy" (ETXTBSY) until that child execs.
func Install(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("install", "-m", "0755", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("installing %s as %s: %v\n%s", src, dst, err, out)
	}
}
