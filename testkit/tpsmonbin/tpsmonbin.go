// Package tpsmonbin builds the tpsmon command for tests that run it as a
// process: linking it (cgo) costs seconds, so each test building its own
// copy was most of a package's test time.
package tpsmonbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// Version is the version the binary is built with (-X main.version).
const Version = "9.9.9-test"

var (
	once sync.Once
	path string
	err  error
)

// Path builds tpsmon on first use and returns where it is; a failed build
// fails every test that asks, with the compiler's output.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() { path, err = build() })
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// build links tpsmon into the user's cache directory. The go command
// leaves a binary there alone when it is up to date with the sources, so
// the test processes that run tpsmon (often at once, under go test ./...)
// link it once between changes, not once each; a lock file makes them
// take turns. Each checkout has a directory of its own (named by its
// go.mod's path): with one shared binary, tests of two checkouts run at
// once ran each other's builds.
func build() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("building tpsmon: go env GOMOD: %w", err)
	}
	sum := sha256.Sum256(bytes.TrimSpace(gomod))
	dir := filepath.Join(base, "tpsmon-test", hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("building tpsmon: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("building tpsmon: %w", err)
	}
	defer lock.Close() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("building tpsmon: lock %s: %w", lock.Name(), err)
	}
	bin := filepath.Join(dir, "tpsmon")
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+Version, "-o", bin, "github.com/tpsmon/tpsmon/cmd/tpsmon")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building tpsmon: %w\n%s", err, out)
	}
	return bin, nil
}
