package main

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/tpsmon/tpsmon/internal/testparallel"
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
