package testparallel

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

const printEnv = "TESTPARALLEL_PRINT"

func TestMain(m *testing.M) {
	if err := AtLeast(5); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if os.Getenv(printEnv) == "1" {
		fmt.Print(flag.Lookup("test.parallel").Value)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAtLeast runs this test binary as its own process with each command
// line and reads back the -test.parallel its tests would get.
func TestAtLeast(t *testing.T) {
	// Where the default (GOMAXPROCS) is already more, it stays.
	unset := fmt.Sprint(max(5, runtime.GOMAXPROCS(0)))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, unset},
		{[]string{"-test.parallel=3"}, "3"},
		{[]string{"-test.parallel", "9"}, "9"},
		{[]string{"-test.v", "-test.count=1"}, unset},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), printEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%v: test.parallel %q, want %q", tc.args, got, tc.want)
		}
	}
}
