package main

import (
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/daemon/preflight"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/testkit/tpsmonbin"
)

// Run as root, check runs again as the service user, whose own output
// says what failed: the failure is said once, and the exit status is 1.
func TestCheckAsRootSaysFailedOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("check probes as the service user only when root runs it (it changes uid); CI runs the tests as root")
	}
	t.Parallel()
	if _, err := user.Lookup(preflight.ServiceUser); err != nil {
		// As the package makes it (sysusers: a system user, no home).
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", preflight.ServiceUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v\n%s", preflight.ServiceUser, err, out)
		}
		t.Cleanup(func() { exec.Command("userdel", preflight.ServiceUser).Run() })
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
	bin := filepath.Join(dir, "tpsmon")
	tpsmonbin.Install(t, tpsmonbin.Path(t), bin)
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
	if !strings.Contains(string(out), "probing as the service does, as user "+preflight.ServiceUser) {
		t.Fatalf("check did not run as %s:\n%s", preflight.ServiceUser, out)
	}
	if n := strings.Count(string(out), "check failed"); n != 1 {
		t.Errorf("%q said %d times, want once:\n%s", "check failed", n, out)
	}
}

// check finds the servers with gpus: auto as the daemon would: here the
// test's own server, by the socket it holds.
func TestCheckReportsAttribution(t *testing.T) {
	srv := httptest.NewServer(&vllmsim.Driven{Rate: 10, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().(*net.TCPAddr).Port
	l.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	cfgPath := filepath.Join(t.TempDir(), "tpsmon.yaml")
	cfg := fmt.Sprintf("gpu: {backend: sim}\nservers:\n  - {name: here, gpus: [auto], metrics_url: %s/metrics}\n"+
		"  - {name: gone, gpus: [auto], metrics_url: http://127.0.0.1:%d/metrics}\n", srv.URL, gone)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ := runCLI(t, "check", "-c", cfgPath)
	for _, want := range []string{
		fmt.Sprintf("ok    attribution here: port %d served by pid %d (found by socket), no GPU process of it seen now", port, os.Getpid()),
		fmt.Sprintf("note  attribution gone: not placed now: nothing listens on port %d", gone),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}
