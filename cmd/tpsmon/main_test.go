package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/testkit/testparallel"
)

// runMain in the environment makes this test binary run tpsmon's main:
// tests of tpsmon as a process run it so, rather than waiting for a build
// (cgo linking costs seconds). Only the test of the release build's
// version stamp builds one (tpsmonbin).
const runMain = "TPSMON_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMain) == "1" {
		main()
		os.Exit(0)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// maxprocs gave this process one P, as the daemon has; the tests
		// and benchmarks that run in it keep Go's default.
		runtime.SetDefaultGOMAXPROCS()
	}
	// The parallel tests wait on the processes they start.
	if err := testparallel.AtLeast(8); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// tpsmonCmd is tpsmon with args as a process: this test binary in main.
func tpsmonCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runMain+"=1")
	return cmd
}

// TestOneProcBeforeHeavyInits: the process gets its one P before any
// package initialiser that allocates much runs (internal/maxprocs says
// why), as the runtime's trace of initialisers shows.
func TestOneProcBeforeHeavyInits(t *testing.T) {
	cmd := tpsmonCmd(t, "version")
	cmd.Env = append(cmd.Env, "GODEBUG=inittrace=1")
	var trace bytes.Buffer
	cmd.Stderr = &trace
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, trace.String())
	}
	// "init PKG @0.5 ms, 0.1 ms clock, 1024 bytes, 3 allocs"
	const heavy = 16 << 10
	seen, heavyBefore := false, []string{}
	for line := range strings.Lines(trace.String()) {
		f := strings.Fields(line)
		if len(f) < 9 || f[0] != "init" {
			continue
		}
		if f[1] == "github.com/tpsmon/tpsmon/internal/maxprocs" {
			seen = true
			break
		}
		if n, err := strconv.Atoi(f[7]); err == nil && n > heavy {
			heavyBefore = append(heavyBefore, f[1]+" "+f[7])
		}
	}
	if !seen {
		t.Fatalf("no initialiser of internal/maxprocs in the trace:\n%s", trace.String())
	}
	if len(heavyBefore) > 0 {
		t.Errorf("initialisers allocating over %d bytes ran before maxprocs: %v", heavy, heavyBefore)
	}
}
