package agent

import (
	"bytes"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// TestRefusedLogLineIsAHole feeds the daemon's log reader and joiner a vLLM
// log (testdata/vllm_refused_line.log) read as the tailer reads it: a line
// every 10 s at 20 tokens/s, the log found readable every second. The third
// line prints an absurd rate and is refused; the 10 s it spoke for,
// (10:00:15, 10:00:25], are a hole: the two windows it falls in are half
// observed, with the valid lines' tokens only, never whole windows of
// fewer tokens (or idle ones).
func TestRefusedLogLineIsAHole(t *testing.T) {
	b, err := os.ReadFile("testdata/vllm_refused_line.log")
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	t0 := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	cfg := configtest.Private(t)
	cfg.Window = 10 * time.Second
	cfg.Servers = []config.ServerConfig{{Name: "v", Engine: "vllm", Log: config.LogSourceConfig{File: "x.log"}}}
	j := window.New(window.Config{Window: cfg.Window, Grace: 11 * time.Second, MaxGap: 2500 * time.Millisecond, Start: t0},
		serversOf(cfg))
	l := testLoop(&pipeline{log: slog.New(slog.DiscardHandler)}, cfg, j)
	var msgs []message
	r, err := l.newLogReader(cfg.Servers[0], func(m message) { msgs = append(msgs, m) })
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	for s := range 50 {
		now := t0.Add(time.Duration(s) * time.Second)
		if s%10 == 5 && s/10 < len(lines) {
			l := bytes.TrimSuffix(lines[s/10], []byte("\n"))
			off += int64(len(lines[s/10]))
			r.line(tail.Line{Text: l, Time: now, Pos: tail.Position{Path: "x.log", Offset: off}})
			r.flush()
		}
		r.alive(now)
	}
	for _, m := range msgs {
		m.apply(l)
	}
	got := map[time.Time]analysis.ServerWindow{}
	for _, c := range analysis.Analyze(j.Close(t0.Add(40*time.Second)), &analysis.Facts{}) {
		for _, w := range c.Servers {
			got[w.Start] = w
		}
	}
	tests := []struct {
		start    int // seconds after 10:00
		tokens   int64
		coverage float64
		state    string
	}{
		{10, 100, 0.5, schema.StateOK}, // half of (5, 15]; (15, 20] is the hole
		{20, 100, 0.5, schema.StateOK}, // (20, 25] is the hole; half of (25, 35]
		{30, 200, 1, schema.StateOK},   // halves of (25, 35] and (35, 45]
	}
	for _, tc := range tests {
		w, ok := got[t0.Add(time.Duration(tc.start)*time.Second)]
		if !ok {
			t.Errorf("window 10:00:%02d not written", tc.start)
			continue
		}
		// The valid lines said 20 tokens/s, and the rate over the observed
		// part says so too.
		if w.Tokens != window.Some(tc.tokens) || w.Coverage != tc.coverage || w.State != tc.state ||
			w.SystemTPS != window.Some(20.0) {
			t.Errorf("window 10:00:%02d: tokens %v coverage %v system_tps %v state %s, want %d at %v, 20, %s",
				tc.start, w.Tokens, w.Coverage, w.SystemTPS, w.State, tc.tokens, tc.coverage, tc.state)
		}
	}
}
