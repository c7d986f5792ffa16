package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/internal/tpsmonbin"
)

// Run as root, check runs again as the service user, whose own output
// says what failed: the failure is said once, and the exit status is 1.
func TestCheckAsRootSaysFailedOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("check probes as the service user only when root runs it (it changes uid); CI runs the tests as root")
	}
	if _, err := user.Lookup(serviceUser); err != nil {
		// As the package makes it (sysusers: a system user, no home).
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", serviceUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v\n%s", serviceUser, err, out)
		}
		t.Cleanup(func() { exec.Command("userdel", serviceUser).Run() })
	}
	// The binary and its configuration where the service user may read.
	dir, err := os.MkdirTemp("", "tpsmon-check-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tpsmonbin.Path(t))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "tpsmon")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: one problem
	cfgPath := filepath.Join(dir, "tpsmon.yaml")
	cfg := fmt.Sprintf("gpu: {backend: none}\nservers:\n  - name: gone\n    metrics_url: http://%s/metrics\n", addr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(bin, "check", "-c", cfgPath).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("check: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "probing as the service does, as user "+serviceUser) {
		t.Fatalf("check did not run as %s:\n%s", serviceUser, out)
	}
	if n := strings.Count(string(out), "check failed"); n != 1 {
		t.Errorf("%q said %d times, want once:\n%s", "check failed", n, out)
	}
}
