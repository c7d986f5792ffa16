package agent

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// glitchingVLLM counts 100 tokens/s but prints bad instead of its counter
// for 200 ms, a second after start.
// With bad "flap", every other page from 1 s to 2 s prints the count of a
// second earlier, as a stale replica behind the same address would.
type glitchingVLLM struct {
	start time.Time
	bad   string
	pages atomic.Int64
}

func (g *glitchingVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	since := time.Since(g.start)
	v := strconv.FormatFloat(100*since.Seconds(), 'f', 3, 64)
	switch {
	case g.bad == "flap" && since >= time.Second && since < 2*time.Second && g.pages.Add(1)%2 == 0:
		v = strconv.FormatFloat(100*(since.Seconds()-1), 'f', 3, 64)
	case g.bad != "flap" && since >= time.Second && since < 1200*time.Millisecond:
		v = g.bad
	}
	fmt.Fprintf(w, "vllm:generation_tokens_total{model_name=\"m\"} %s\nvllm:num_requests_running{model_name=\"m\"} 4\n", v)
}

// TestOneBadSampleDoesNotCorrupt runs the daemon's pipeline against a
// server that prints one absurd counter value for 200 ms: every window
// reads what the valid samples say (50 tokens per 500 ms window, within
// what a scrape more or less moves), and the refused values are counted
// with their reason. It runs in a bubble (bubble_test.go).
func TestOneBadSampleDoesNotCorrupt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bad    string
		reason sample.Reason
	}{
		{"99999999999999999999.0", sample.Huge},
		{"1e308", sample.Huge},
		{"NaN", sample.NotANumber},
		{"+Inf", sample.Infinite},
		{"-5", sample.Negative},
		{"flap", sample.Flap},
	}
	for _, tc := range tests {
		t.Run(tc.bad, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) { oneBadSample(t, tc.bad, tc.reason) })
		})
	}
}

var tokensRe = regexp.MustCompile(`tokens=(-?\d+)i`)

func oneBadSample(t *testing.T, bad string, reason sample.Reason) {
	a, out := runOneServer(t, "llm", &glitchingVLLM{start: time.Now(), bad: bad}, 2600*time.Millisecond)
	ms := tokensRe.FindAllStringSubmatch(out, -1)
	if len(ms) < 4 {
		t.Fatalf("%d windows with tokens:\n%s", len(ms), out)
	}
	// The first window and the last (cut by shutdown) are partial.
	for i, m := range ms[1 : len(ms)-1] {
		n, _ := strconv.Atoi(m[1])
		if n < 35 || n > 65 {
			t.Errorf("window %d: tokens=%d, the server made 50:\n%s", i+1, n, out)
		}
	}
	got := map[sample.Reason]uint64{}
	a.metrics.discards.Each(func(server string, r sample.Reason, n uint64) { got[r] += n })
	if got[reason] == 0 {
		t.Errorf("discards %v, want some %v", got, reason)
	}
}

// failingOutput fails while failing is set.
type failingOutput struct{ failing bool }

func (f *failingOutput) WriteWindows([]analysis.Closed) error {
	if f.failing {
		return errors.New("disk full")
	}
	return nil
}

// TestOutputErrorsLoggedOncePerEpisode: 33 failed writes in a row are one
// line, and the recovery one more with the count.
func TestOutputErrorsLoggedOncePerEpisode(t *testing.T) {
	var logs bytes.Buffer
	out := &failingOutput{failing: true}
	p := testLoop(&pipeline{log: slog.New(slog.NewTextHandler(&logs, nil)), outputs: []WindowWriter{out}}, configtest.Private(t), nil)
	pt := []window.Closed{{Start: time.Unix(1000, 0), Servers: []window.ServerWindow{{Server: "m"}}}}
	for range 33 {
		p.emit(pt)
	}
	out.failing = false
	p.emit(pt)
	if n := strings.Count(logs.String(), "output failed"); n != 1 {
		t.Errorf("%d lines for one episode:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "failed_writes=33") {
		t.Errorf("recovery not logged with its count:\n%s", logs.String())
	}
}

// TestLivenessSaysStuck: /healthz answers 503 only when the main loop has
// made no progress for the stall time.
func TestLivenessSaysStuck(t *testing.T) {
	h := &health{}
	tel := &telemetry{health: h, stale: 3 * time.Second}
	now := time.Now()
	if r, code := tel.live(now); code != 200 || r.Status != "starting" {
		t.Errorf("before the loop: %d %+v", code, r)
	}
	h.loopAt.Store(now.Add(-time.Second).UnixNano())
	if r, code := tel.live(now); code != 200 || r.Status != "alive" {
		t.Errorf("loop a second ago: %d %+v", code, r)
	}
	h.loopAt.Store(now.Add(-10 * time.Second).UnixNano())
	if r, code := tel.live(now); code != 503 || r.Status != "stuck" || r.LoopAgeSeconds < 9 {
		t.Errorf("loop 10 s ago: %d %+v", code, r)
	}
}
