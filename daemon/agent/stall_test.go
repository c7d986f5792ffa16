package agent

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
)

// slowOutput takes 2 s over each write, as a stalled disk or process
// would: meanwhile the scrapes queue up for the main loop.
type slowOutput struct{ w *sink.LPWriter }

func (s slowOutput) WriteWindows(cs []analysis.Closed) error {
	time.Sleep(2 * time.Second)
	return s.w.WriteWindows(cs)
}

// TestStalledLoopTakesWhatWasHandedOver: after the main loop stalls, the
// scrapes handed over meanwhile go into their windows before the next
// tick closes them; none is late. Before, select took the tick or a
// waiting scrape at random, and the scrapes taken after the flush were
// counted late and lost (at load 4, 49 log lines of the busy reload
// test: 4,704 tokens).
func TestStalledLoopTakesWhatWasHandedOver(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := &vllmsim.Driven{Rate: 100, Start: time.Now().Add(-time.Hour), ResetAt: time.Now().Add(time.Hour)}
		cfg := bubbleConfig(t)
		cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
		cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: "http://llm/metrics",
			GPUs: []string{"auto"}, ScrapeInterval: 50 * time.Millisecond}}
		var out bytes.Buffer
		a := newAgent(cfg, Options{Outputs: []WindowWriter{slowOutput{sink.NewLPWriter(&out)}}}, hooks{client: handlerClient(sim)})
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		if err := a.Run(ctx); err != nil {
			t.Fatal(err)
		}
		windows := bytes.Count(out.Bytes(), []byte("tpsmon_server,"))
		if windows < 10 {
			t.Fatalf("%d windows written", windows)
		}
		if late := counted(a.metrics.late); late > 0 {
			t.Errorf("%v samples late; %d windows written, each write taking 2 s", late, windows)
		}
	})
}

// freeze is a stall of the whole process as the loop and one source see
// it: the loop's first write takes 2 s, and the GPU reading taken while
// it runs is handed over only when it has ended, as a sampler frozen
// between reading and handing over would.
type freeze struct {
	once           sync.Once
	writing, wrote chan struct{}
	held           atomic.Bool // a reading was held across the stall
}

func (f *freeze) WriteWindows(cs []analysis.Closed) error {
	f.once.Do(func() {
		close(f.writing)
		time.Sleep(2 * time.Second)
		close(f.wrote)
	})
	return nil
}

type frozenGPUs struct {
	f *freeze
	GPUSampler
}

func (g frozenGPUs) Sample(now time.Time) []sample.GPU {
	s := g.GPUSampler.Sample(now)
	select {
	case <-g.f.writing:
		if g.f.held.CompareAndSwap(false, true) {
			<-g.f.wrote
			time.Sleep(time.Millisecond) // the loop runs first
		}
	default:
	}
	return s
}

// TestTickAfterStallClosesNothing: the first tick after the process stood
// still closes no window, so what a source read just before the stall and
// hands over after it is counted, not late. Before, that tick closed every
// window the stall had carried past its grace.
func TestTickAfterStallClosesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := bubbleConfig(t)
		cfg.Window, cfg.Grace, cfg.GPU.Interval = time.Second, 100*time.Millisecond, 50*time.Millisecond
		cfg.Servers = nil
		f := &freeze{writing: make(chan struct{}), wrote: make(chan struct{})}
		a := newAgent(cfg, Options{Outputs: []WindowWriter{f},
			OpenGPU: func() (GPUSampler, error) {
				return frozenGPUs{f, gpusim.New(1, func(time.Time) float64 { return 0.5 })}, nil
			}},
			hooks{})
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
		defer cancel()
		if err := a.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if !f.held.Load() {
			t.Fatal("no GPU reading was held across the stall")
		}
		if late := counted(a.metrics.late); late > 0 {
			t.Errorf("%v readings late: the one held across the 2 s stall, handed over 1 ms after it", late)
		}
	})
}

// afterStall puts off closing windows for one tick after each stall, and
// never for two ticks in a row: a loop stalled at every tick still closes
// its windows every other tick.
func TestAfterStall(t *testing.T) {
	const stalled = 150 * time.Millisecond
	t0 := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		gaps []time.Duration // between ticks, the first after the loop's start
		want []bool          // each tick put off
	}{
		{"on time", []time.Duration{0, 100 * time.Millisecond, 100 * time.Millisecond}, []bool{false, false, false}},
		{"at the bound", []time.Duration{0, stalled}, []bool{false, false}},
		{"one stall", []time.Duration{0, 100 * time.Millisecond, 2 * time.Second, 100 * time.Millisecond}, []bool{false, false, true, false}},
		{"stalled at every tick", []time.Duration{0, time.Second, time.Second, time.Second, time.Second}, []bool{false, true, false, true, false}},
		{"the clock stepped back", []time.Duration{0, -time.Hour, 100 * time.Millisecond}, []bool{false, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &loop{pipeline: &pipeline{health: &health{}}}
			now := t0
			for i, g := range tc.gaps {
				now = now.Add(g)
				if got := l.afterStall(now, stalled); got != tc.want[i] {
					t.Errorf("tick %d (%v after the one before): put off %v, want %v", i, g, got, tc.want[i])
				}
			}
		})
	}
}
