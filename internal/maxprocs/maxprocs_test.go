package maxprocs

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// report, in the environment, makes this test binary print its GOMAXPROCS
// and exit: the setting of a fresh process under a chosen environment.
const report = "MAXPROCS_TEST_REPORT"

func TestMain(m *testing.M) {
	if os.Getenv(report) == "1" {
		os.Stdout.WriteString(strconv.Itoa(runtime.GOMAXPROCS(0)))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestProcs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Log("one CPU: the default is one P already, so only the environment's setting is told apart")
	}
	for _, tc := range []struct {
		name string
		env  string // GOMAXPROCS=env; "-" leaves it out
		want int
	}{
		{"unset: one P", "-", 1},
		{"empty is unset", "", 1},
		{"the environment wins", "3", 3},
		{"even when it asks for one", "1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "GOMAXPROCS=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, report+"=1")
			if tc.env != "-" {
				cmd.Env = append(cmd.Env, "GOMAXPROCS="+tc.env)
			}
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := strconv.Atoi(string(out)); got != tc.want {
				t.Errorf("GOMAXPROCS %q: the process ran with %s Ps, want %d", tc.env, out, tc.want)
			}
		})
	}
}
