// Package tpsmonbin builds the tpsmon command once per test binary, for
// tests that run it as a process: linking it (cgo) costs seconds, so each
// test building its own copy was most of a package's test time.
package tpsmonbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Version is the version the binary is built with (-X main.version).
const Version = "9.9.9-test"

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Path builds tpsmon on first use and returns where it is; a failed build
// fails every test that asks, with the compiler's output.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		dir, err = os.MkdirTemp("", "tpsmonbin")
		if err != nil {
			return
		}
		path = filepath.Join(dir, "tpsmon")
		cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+Version, "-o", path, "github.com/tpsmon/tpsmon/cmd/tpsmon")
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("building tpsmon: %w\n%s", berr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Remove deletes the binary; TestMain calls it after the tests ran.
func Remove() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}
