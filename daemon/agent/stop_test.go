package agent

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/internal/cpuclock"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/testkit/syncbuf"
	"github.com/tpsmon/tpsmon/window"
)

// TestStopWhateverSourcesDo runs the daemon with every kind of source
// stuck at once: a log that is a FIFO no one writes (whose plain open
// never returns), a log that is /dev/zero, a log that is a sparse 1 TiB
// file of zeros resumed from its start (endless to read, and a regular
// file), a journal whose journalctl never answers and leaves a child
// holding its pipes, a metrics server that accepts and never replies, and
// GPUs whose driver call hangs. The logs that are no regular files are
// refused, once each, naming the path and what it is; the endless one
// costs a fraction of a core, not a core; and after cancel (SIGTERM) Run
// returns within the stop budget, the last windows delivered to InfluxDB.
func TestStopWhateverSourcesDo(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	endless := filepath.Join(dir, "endless.log")
	f, err := os.Create(endless)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	f.Close()
	positions := filepath.Join(dir, "positions")
	os.MkdirAll(positions, 0o700)
	st := fi.Sys().(*syscall.Stat_t)
	if err := tail.NewPositionFile(filepath.Join(positions, "endless.json")).Save(tail.Position{Path: endless,
		Dev: uint64(st.Dev), Ino: st.Ino, Head: hex.EncodeToString(make([]byte, 64))}); err != nil {
		t.Fatal(err)
	}
	journalctl(t, dir)
	mute := muteServer(t)
	gpus := &stallingGPUs{n: 2, release: make(chan struct{})}
	t.Cleanup(func() { close(gpus.release) })

	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "stop")
	cfg := configtest.Private(t)
	cfg.HTTP.Listen = ""
	cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
	cfg.GPU.Interval = 100 * time.Millisecond
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db
	logSrc := func(name, file string) config.ServerConfig {
		return config.ServerConfig{Name: name, Engine: "vllm", Log: config.LogSourceConfig{File: file}, GPUs: []string{"0"}}
	}
	cfg.Servers = []config.ServerConfig{
		logSrc("fifo", fifo), logSrc("zero", "/dev/zero"), logSrc("endless", endless),
		{Name: "journal", Engine: "vllm", Log: config.LogSourceConfig{JournalUnit: "vllm.service"}, GPUs: []string{"0"}},
		{Name: "mute", Engine: "vllm", MetricsURL: "http://" + mute + "/metrics", ScrapeInterval: 100 * time.Millisecond,
			GPUs: []string{"0"}},
	}
	var logs syncbuf.Buffer
	const budget = time.Second
	a := newAgent(cfg, Options{Log: slog.New(slog.NewTextHandler(&logs, nil)), OpenGPU: func() (GPUSampler, error) { return gpus, nil }},
		hooks{positionDir: positions, logGrace: 200 * time.Millisecond, logPoll: 100 * time.Millisecond, stopSources: budget})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// Every source is where it sticks by now.
	cpu0, wall0 := cpuclock.Self(), time.Now()
	time.Sleep(1500 * time.Millisecond)
	cpu, wall := cpuclock.Self()-cpu0, time.Since(wall0)
	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run still running 10 s after cancel (CPU %v over %v before it); log:\n%s", cpu, wall, logs.String())
	}
	// The sources' budget, then InfluxDB's flush of a few windows, which
	// a local InfluxDB takes in milliseconds: far below TimeoutStopSec.
	took := time.Since(stopped)
	t.Logf("CPU %v over %v of stuck sources; Run returned %v after cancel", cpu, wall, took)
	if took > budget+3*time.Second {
		t.Errorf("Run returned %v after cancel, want within %v", took, budget+3*time.Second)
	}
	if cpu > wall/4 {
		t.Errorf("%v of CPU in %v: a source spins", cpu, wall)
	}
	out := logs.String()
	// Only the hung driver call outlived the budget; every other source
	// ended when told.
	_, stuck, _ := strings.Cut(out, "sources still running at shutdown")
	stuck, _, _ = strings.Cut(stuck, "\n")
	if !strings.Contains(stuck, "stallingGPUs") || strings.Contains(stuck, "tail.") || strings.Contains(stuck, "Scraper") {
		t.Errorf("still running after the budget: %s", stuck)
	}
	for _, want := range []string{fifo + " is a named pipe (FIFO)", "/dev/zero is a character device"} {
		if n := strings.Count(out, want); n != 1 {
			t.Errorf("%q said %d times, want once; log:\n%s", want, n, out)
		}
	}
	last := window.Start(stopped, cfg.Window).Unix()
	for _, s := range cfg.Servers {
		starts, _ := influxtest.WindowStarts(t, base, db, s.Name)
		if !starts[last] {
			t.Errorf("server %s: the window open at shutdown (%d) is not in InfluxDB: %v", s.Name, last, starts)
		}
	}
}

// journalctl puts a journalctl first on PATH that never answers: it
// starts a child that holds its output pipes open, and waits for it, so
// killing journalctl alone does not close them. The child is ended with
// the test.
func journalctl(t *testing.T, dir string) {
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o700)
	pids := filepath.Join(dir, "journalctl.pids")
	script := "#!/bin/sh\nsleep 60 &\necho $! >> " + pids + "\nwait\n"
	if err := os.WriteFile(filepath.Join(bin, "journalctl"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, l := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(l); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// muteServer accepts connections on a loopback port and never answers;
// it returns the address.
func muteServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}
