package agent

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// stallingGPUs answers n samples, then blocks like a hung driver call
// until released.
type stallingGPUs struct {
	mu      sync.Mutex
	n       int
	release chan struct{}
}

func (g *stallingGPUs) Sample(now time.Time) []sample.GPU {
	g.mu.Lock()
	g.n--
	stall := g.n < 0
	g.mu.Unlock()
	if stall {
		<-g.release
	}
	return []sample.GPU{{Time: now, UUID: "GPU-s", Has: sample.FieldUtil}}
}

func (*stallingGPUs) Close() error { return nil }

func TestWatchdogStopsWhenSamplerStalls(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "1000000")
	synctest.Test(t, func(t *testing.T) {
		cfg := bubbleConfig(t)
		cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
		cfg.GPU.Interval = 100 * time.Millisecond
		cfg.Sink.File.Path = filepath.Join(t.TempDir(), "out.lp")
		g := &stallingGPUs{n: 15, release: make(chan struct{})}
		var sd notes
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- newAgent(cfg, Options{OpenGPU: func() (GPUSampler, error) { return g, nil }},
				hooks{stallAfter: time.Second, notify: sd.send}).Run(ctx)
		}()
		// The sampler stalls after 1.5 s; within the stall limit (1 s) the
		// pings stop, and none come for the following 2 s.
		time.Sleep(4 * time.Second)
		before := sd.len()
		time.Sleep(2 * time.Second)
		stalled := sd.len()
		if n := sd.count(before, stalled, "WATCHDOG=1"); n != 0 {
			t.Errorf("%d watchdog pings while the sampler was stuck", n)
		}
		if n := sd.count(0, before, "WATCHDOG=1"); n < 2 {
			t.Errorf("only %d pings before the stall", n)
		}
		close(g.release)
		// Once the sampler moves again, so does the watchdog.
		time.Sleep(2 * time.Second)
		if n := sd.count(stalled, sd.len(), "WATCHDOG=1"); n == 0 {
			t.Error("no watchdog ping after the sampler recovered")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
