package agent

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// testLoop is the main loop's state as run sets it up, for tests that
// apply messages or write windows without running the loop: p's missing
// parts are filled as New would (health, metrics, clock).
func testLoop(p *pipeline, cfg *config.Config, j *window.Joiner) *loop {
	if p.health == nil {
		p.health = &health{}
	}
	if p.metrics == nil {
		p.metrics = newMetrics()
	}
	if p.now == nil {
		p.now = time.Now
	}
	return &loop{pipeline: p, cfg: cfg, j: j, down: map[string]bool{}, logPos: map[string]tail.Position{},
		logDirty: map[string]bool{}, gpuErr: map[string]bool{}, suspect: map[string]bool{}, placed: map[string][]string{}}
}

// TestReconfigHandsTheLoopItsThresholds: the state thresholds travel in
// the reload's message; the next windows written are analysed under them.
func TestReconfigHandsTheLoopItsThresholds(t *testing.T) {
	cfg := configtest.Private(t)
	next := *cfg
	next.Thresholds.UnderUtil = 60
	out := &recorder{}
	j := window.New(window.Config{Window: cfg.Window, MaxGap: time.Second, Host: "h", Start: time.Unix(1000, 0)}, nil)
	l := testLoop(&pipeline{log: slog.New(slog.DiscardHandler), outputs: []WindowWriter{out}}, cfg, j)
	// Tokens flow, nothing waits, the GPU is 50 % busy: ok under 40, under-utilised under 60.
	w := window.ServerWindow{Server: "m", Tokens: window.Some[int64](100), ExactTokens: window.Some(100.0),
		Running: window.Some(4.0), Waiting: window.Some(0.0), GPUUtil: window.Some(50.0)}
	closed := []window.Closed{{Start: time.Unix(1000, 0), Servers: []window.ServerWindow{w}}}
	l.emit(closed)
	l.reconfigure(reconfig{cfg: &next})
	l.emit(closed)
	var got []string
	for _, c := range out.cs {
		got = append(got, c.Servers[0].State)
	}
	if want := []string{schema.StateOK, schema.StateUnderutilized}; !slices.Equal(got, want) {
		t.Errorf("states before and after the reload %v, want %v", got, want)
	}
}
