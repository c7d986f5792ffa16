package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tpsmon/tpsmon/sim/sdnotify"
)

func TestSystemdLifecycle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tpsmon.yaml")
	good := fmt.Sprintf(`window: 1s
grace: 200ms
gpu: {backend: sim, interval: 100ms}
discovery: {enabled: false}
sink: {file: {path: %s}}
http: {listen: "127.0.0.1:0"}
`, filepath.Join(dir, "out.lp"))
	os.WriteFile(cfgPath, []byte(good), 0o600)
	sock := sdnotify.Listen(t)
	cmd := tpsmonCmd(t, "run", "--config", cfgPath)
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+sock.Path, "WATCHDOG_USEC=1000000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	ready := sock.WaitFor(t, 0, "READY=1")
	if m := sock.All()[ready]; m != "READY=1\nSTATUS=monitoring 0 servers, 2 GPUs" {
		t.Errorf("READY message %q", m)
	}
	w := sock.WaitFor(t, ready+1, "WATCHDOG=1")
	w = sock.WaitFor(t, w+1, "WATCHDOG=1")

	// A valid reload: RELOADING with MONOTONIC_USEC, then READY again.
	cmd.Process.Signal(syscall.SIGHUP)
	r := sock.WaitFor(t, w+1, "RELOADING=1")
	if !strings.Contains(sock.All()[r], "\nMONOTONIC_USEC=") {
		t.Errorf("RELOADING without MONOTONIC_USEC: %q", sock.All()[r])
	}
	r2 := sock.WaitFor(t, r+1, "READY=1")

	// An invalid config is rejected; the daemon keeps running and pinging.
	os.WriteFile(cfgPath, []byte(good+"bogus_key: 1\n"), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	r3 := sock.WaitFor(t, r2+1, "RELOADING=1")
	r4 := sock.WaitFor(t, r3+1, "READY=1")
	w2 := sock.WaitFor(t, r4+1, "WATCHDOG=1")

	// An empty file is rejected like any invalid one, not taken as
	// "defaults for everything" (which would reset the GPU backend to nvml).
	os.WriteFile(cfgPath, nil, 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	r5 := sock.WaitFor(t, w2+1, "RELOADING=1")
	r6 := sock.WaitFor(t, r5+1, "READY=1")
	w2 = sock.WaitFor(t, r6+1, "WATCHDOG=1")
	if m := sock.All()[r6]; !strings.Contains(m, "2 GPUs") {
		t.Errorf("after an empty reload: %q, want the sim GPUs kept", m)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	s := sock.WaitFor(t, w2+1, "STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "reload rejected") || !strings.Contains(stderr.String(), "bogus_key") ||
		!strings.Contains(stderr.String(), "the file is empty") {
		t.Errorf("the rejected reload was not logged with its reason:\n%s", stderr.String())
	}
	if n := sock.Count(ready, s, "WATCHDOG=1"); n < 3 {
		t.Errorf("%d watchdog pings in %d messages", n, s-ready)
	}
	if sock.Count(s+1, len(sock.All()), "READY=1") != 0 {
		t.Error("READY after STOPPING")
	}
}
