package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"

	"github.com/tpsmon/tpsmon/collector/gpu"
)

// notifySocket listens like systemd for sd_notify datagrams.
type notifySocket struct {
	path string
	mu   sync.Mutex
	msgs []string
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	n := &notifySocket{path: filepath.Join(t.TempDir(), "notify.sock")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n
}

func (n *notifySocket) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// waitFor waits until a message after index from starts with prefix and
// returns its index.
func (n *notifySocket) waitFor(t *testing.T, from int, prefix string) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		msgs := n.all()
		for i := from; i < len(msgs); i++ {
			if strings.HasPrefix(msgs[i], prefix) {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q after message %d; got %q", prefix, from, n.all())
	return -1
}

func (n *notifySocket) count(from, to int, prefix string) int {
	c := 0
	for _, m := range n.all()[from:to] {
		if strings.HasPrefix(m, prefix) {
			c++
		}
	}
	return c
}

func TestSystemdLifecycle(t *testing.T) {
	bin := buildTpsmon(t)
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
	sock := listenNotify(t)
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock.path, "WATCHDOG_USEC=1000000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	ready := sock.waitFor(t, 0, "READY=1")
	if m := sock.all()[ready]; m != "READY=1\nSTATUS=monitoring 0 servers, 2 GPUs" {
		t.Errorf("READY message %q", m)
	}
	w := sock.waitFor(t, ready+1, "WATCHDOG=1")
	w = sock.waitFor(t, w+1, "WATCHDOG=1")

	// A valid reload: RELOADING with MONOTONIC_USEC, then READY again.
	cmd.Process.Signal(syscall.SIGHUP)
	r := sock.waitFor(t, w+1, "RELOADING=1")
	if !strings.Contains(sock.all()[r], "\nMONOTONIC_USEC=") {
		t.Errorf("RELOADING without MONOTONIC_USEC: %q", sock.all()[r])
	}
	r2 := sock.waitFor(t, r+1, "READY=1")

	// An invalid config is rejected; the daemon keeps running and pinging.
	os.WriteFile(cfgPath, []byte(good+"bogus_key: 1\n"), 0o600)
	cmd.Process.Signal(syscall.SIGHUP)
	r3 := sock.waitFor(t, r2+1, "RELOADING=1")
	r4 := sock.waitFor(t, r3+1, "READY=1")
	w2 := sock.waitFor(t, r4+1, "WATCHDOG=1")

	cmd.Process.Signal(syscall.SIGTERM)
	s := sock.waitFor(t, w2+1, "STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "reload rejected") || !strings.Contains(stderr.String(), "bogus_key") {
		t.Errorf("the rejected reload was not logged with its reason:\n%s", stderr.String())
	}
	if n := sock.count(ready, s, "WATCHDOG=1"); n < 3 {
		t.Errorf("%d watchdog pings in %d messages", n, s-ready)
	}
	if sock.count(s+1, len(sock.all()), "READY=1") != 0 {
		t.Error("READY after STOPPING")
	}
}

// stallingGPUs answers n samples, then blocks like a hung driver call
// until released.
type stallingGPUs struct {
	mu      sync.Mutex
	n       int
	release chan struct{}
}

func (g *stallingGPUs) Sample(now time.Time) []gpu.Sample {
	g.mu.Lock()
	g.n--
	stall := g.n < 0
	g.mu.Unlock()
	if stall {
		<-g.release
	}
	return []gpu.Sample{{Time: now, UUID: "GPU-s", Has: gpu.FieldUtil}}
}

func (*stallingGPUs) Close() error { return nil }

func TestWatchdogStopsWhenSamplerStalls(t *testing.T) {
	sock := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", sock.path)
	t.Setenv("WATCHDOG_USEC", "1000000")
	cfg := testConfig(t)
	cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
	cfg.GPU.Interval = 100 * time.Millisecond
	cfg.Sink.File.Path = filepath.Join(t.TempDir(), "out.lp")
	g := &stallingGPUs{n: 15, release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runDaemon(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
			daemonOpts{openGPU: func() (gpuSampler, error) { return g, nil }})
	}()
	first := sock.waitFor(t, 0, "WATCHDOG=1")
	_ = first
	// The sampler stalls after 1.5 s; within the stale limit (3 s) the
	// pings stop, and none come for the following 2 s.
	time.Sleep(6 * time.Second)
	before := len(sock.all())
	time.Sleep(2 * time.Second)
	if n := sock.count(before, len(sock.all()), "WATCHDOG=1"); n != 0 {
		t.Errorf("%d watchdog pings while the sampler was stuck", n)
	}
	if n := sock.count(0, before, "WATCHDOG=1"); n < 2 {
		t.Errorf("only %d pings before the stall", n)
	}
	close(g.release)
	// Once the sampler moves again, so does the watchdog.
	sock.waitFor(t, before, "WATCHDOG=1")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestJournalHandlerFields(t *testing.T) {
	type sent struct {
		msg  string
		pri  journal.Priority
		vars map[string]string
	}
	var got []sent
	h := &journalHandler{level: slog.LevelInfo, fallback: io.Discard,
		send: func(msg string, pri journal.Priority, vars map[string]string) error {
			got = append(got, sent{msg, pri, vars})
			return nil
		}}
	log := slog.New(h).With("server", "llama-70b")
	log.Debug("hidden")
	log.Warn("server unreadable", "gpu", 3, "err", "connection refused")
	if len(got) != 1 {
		t.Fatalf("sent %d records, want 1 (debug is below the level)", len(got))
	}
	g := got[0]
	if g.pri != journal.PriWarning || g.vars["SERVER"] != "llama-70b" || g.vars["GPU"] != "3" || g.vars["ERR"] != "connection refused" {
		t.Errorf("journal record %+v", g)
	}
	if g.msg != `server unreadable server=llama-70b gpu=3 err="connection refused"` {
		t.Errorf("message %q", g.msg)
	}
}
