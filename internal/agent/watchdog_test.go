package agent

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/gpu"
	"github.com/tpsmon/tpsmon/internal/config/configtest"
	"github.com/tpsmon/tpsmon/internal/sim/sdnotify"
)

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
	sock := sdnotify.Listen(t)
	t.Setenv("NOTIFY_SOCKET", sock.Path)
	t.Setenv("WATCHDOG_USEC", "1000000")
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
	cfg.GPU.Interval = 100 * time.Millisecond
	cfg.Sink.File.Path = filepath.Join(t.TempDir(), "out.lp")
	g := &stallingGPUs{n: 15, release: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- New(cfg, Options{OpenGPU: func() (GPUSampler, error) { return g, nil }, StallAfter: time.Second}).Run(ctx)
	}()
	first := sock.WaitFor(t, 0, "WATCHDOG=1")
	_ = first
	// The sampler stalls after 1.5 s; within the stall limit (1 s) the
	// pings stop, and none come for the following 2 s.
	time.Sleep(4 * time.Second)
	before := len(sock.All())
	time.Sleep(2 * time.Second)
	if n := sock.Count(before, len(sock.All()), "WATCHDOG=1"); n != 0 {
		t.Errorf("%d watchdog pings while the sampler was stuck", n)
	}
	if n := sock.Count(0, before, "WATCHDOG=1"); n < 2 {
		t.Errorf("only %d pings before the stall", n)
	}
	close(g.release)
	// Once the sampler moves again, so does the watchdog.
	sock.WaitFor(t, before, "WATCHDOG=1")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
