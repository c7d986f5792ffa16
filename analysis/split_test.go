package analysis

import (
	"math"
	"testing"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// count is a counter's window: delta d over the window ending at total.
func count(total, d, rate float64) window.Count {
	return window.Count{Delta: d, Total: total, Rate: rate, RateOK: rate >= 0, OK: true}
}

// TestPromptSplit: the three sources add up to the window's prompt
// tokens, the hit rate is token-weighted, prompt_tps becomes the computed
// rate; without both counts every field is absent and prompt_tps stays.
func TestPromptSplit(t *testing.T) {
	var w window.ServerWindow
	w.PromptTokens, w.PromptTPS = window.Some(int64(1000)), window.Some(100.0)
	w.Counts[sample.PromptComputed] = count(5250.4, 250, 25)
	w.Counts[sample.PromptCached] = count(7700, 700, 70)
	w.Counts[sample.PromptExternal] = count(550, 50, 5)
	a := analyzeServer(w, DefaultThresholds, &Facts{}, nil)
	sum := a.PromptComputedTokens.V + a.PromptCachedTokens.V + a.PromptExternalTokens.V
	if !a.PromptComputedTokens.OK || !a.PromptCachedTokens.OK || !a.PromptExternalTokens.OK || sum != w.PromptTokens.V {
		t.Errorf("computed %v + cached %v + external %v = %d, want prompt_tokens %d", a.PromptComputedTokens,
			a.PromptCachedTokens, a.PromptExternalTokens, sum, w.PromptTokens.V)
	}
	if !a.PrefixHitRate.OK || math.Abs(a.PrefixHitRate.V-0.7) > 1e-12 {
		t.Errorf("prefix_hit_rate %v, want 0.7 (700 of 1000 tokens)", a.PrefixHitRate)
	}
	if a.PromptTPS != window.Some(25.0) {
		t.Errorf("prompt_tps %v, want the computed rate 25", a.PromptTPS)
	}

	for _, missing := range []sample.Counter{sample.PromptComputed, sample.PromptCached} {
		v := w
		v.Counts[missing] = window.Count{}
		a := analyzeServer(v, DefaultThresholds, &Facts{}, nil)
		if a.PromptComputedTokens.OK || a.PromptCachedTokens.OK || a.PromptExternalTokens.OK || a.PrefixHitRate.OK {
			t.Errorf("without %v: split %v %v %v %v, want absent", missing, a.PromptComputedTokens, a.PromptCachedTokens,
				a.PromptExternalTokens, a.PrefixHitRate)
		}
		if a.PromptTPS != w.PromptTPS {
			t.Errorf("without %v: prompt_tps %v, want the prompt counter's %v", missing, a.PromptTPS, w.PromptTPS)
		}
	}
}

// TestSpeculation: acceptance and tokens per step from the counters, else
// the engine's gauges; spec_ineffective under the bound; absent without
// drafts (a zero-draft window is no speculation, not 0 % acceptance).
func TestSpeculation(t *testing.T) {
	tests := []struct {
		name           string
		counts         map[sample.Counter]window.Count
		gauges         map[sample.Gauge]float64
		rate, perStep  float64 // -1: absent
		finding        string
		findingPresent bool
	}{
		{"counters", map[sample.Counter]window.Count{sample.SpecDrafts: count(1, 100, -1),
			sample.SpecDraftTokens: count(1, 300, -1), sample.SpecAccepted: count(1, 150, -1)}, nil, 0.5, 2.5, "", true},
		{"ineffective", map[sample.Counter]window.Count{sample.SpecDrafts: count(1, 100, -1),
			sample.SpecDraftTokens: count(1, 400, -1), sample.SpecAccepted: count(1, 40, -1)}, nil, 0.1, 1.4,
			FindingSpecIneffective, true},
		{"at the bound is effective", map[sample.Counter]window.Count{sample.SpecDrafts: count(1, 10, -1),
			sample.SpecDraftTokens: count(1, 10, -1), sample.SpecAccepted: count(1, 3, -1)}, nil, 0.3, 1.3, "", true},
		{"no drafts in the window", map[sample.Counter]window.Count{sample.SpecDrafts: count(0, 0, -1),
			sample.SpecDraftTokens: count(0, 0, -1), sample.SpecAccepted: count(0, 0, -1)}, nil, -1, -1, "", false},
		{"gauges", nil, map[sample.Gauge]float64{sample.SpecAcceptLength: 2.6, sample.SpecAcceptRate: 0.53}, 0.53, 2.6, "", true},
		{"gauges at 0: speculation off", nil, map[sample.Gauge]float64{sample.SpecAcceptLength: 0, sample.SpecAcceptRate: 0}, -1, -1, "", false},
		{"nothing", nil, nil, -1, -1, "", false},
	}
	opt := func(v float64) window.Opt[float64] {
		if v < 0 {
			return window.Opt[float64]{}
		}
		return window.Some(v)
	}
	for _, tt := range tests {
		var w window.ServerWindow
		for c, v := range tt.counts {
			w.Counts[c] = v
		}
		for g, v := range tt.gauges {
			w.Gauges[g] = window.Some(v)
		}
		a := analyzeServer(w, DefaultThresholds, &Facts{}, nil)
		if a.SpecAcceptRate.OK != (tt.rate >= 0) || math.Abs(a.SpecAcceptRate.V-opt(tt.rate).V) > 1e-12 {
			t.Errorf("%s: spec_accept_rate %v, want %v", tt.name, a.SpecAcceptRate, opt(tt.rate))
		}
		if a.TokensPerStep.OK != (tt.perStep >= 0) || math.Abs(a.TokensPerStep.V-opt(tt.perStep).V) > 1e-12 {
			t.Errorf("%s: tokens_per_step %v, want %v", tt.name, a.TokensPerStep, opt(tt.perStep))
		}
		if a.SpecFinding.OK != tt.findingPresent || a.SpecFinding.V != tt.finding {
			t.Errorf("%s: spec_finding %v, want %q (present %v)", tt.name, a.SpecFinding, tt.finding, tt.findingPresent)
		}
	}
}

// TestWaitingReasonsAndSleep: only requests waiting for capacity count as
// waiting; a sleeping engine is sleeping, not idle.
func TestWaitingReasonsAndSleep(t *testing.T) {
	full := func() window.ServerWindow {
		var w window.ServerWindow
		w.ExactTokens, w.Running, w.Waiting = window.Some(100.0), window.Some(4.0), window.Some(5.0)
		w.KVCacheUsage, w.GPUUtil = window.Some(0.95), window.Some(75.0)
		return w
	}
	tests := []struct {
		name string
		mod  func(*window.ServerWindow)
		want string
	}{
		{"waiting without reasons, full cache", func(*window.ServerWindow) {}, schema.StateKVBound},
		{"all deferred: not memory", func(w *window.ServerWindow) {
			w.Gauges[sample.WaitingCapacity], w.Gauges[sample.WaitingDeferred] = window.Some(0.0), window.Some(5.0)
		}, schema.StateOK},
		{"deferred alone, rest for capacity", func(w *window.ServerWindow) { w.Gauges[sample.WaitingDeferred] = window.Some(2.0) }, schema.StateKVBound},
		{"deferred alone, all of them", func(w *window.ServerWindow) { w.Gauges[sample.WaitingDeferred] = window.Some(5.0) }, schema.StateOK},
		{"capacity waits", func(w *window.ServerWindow) {
			w.Gauges[sample.WaitingCapacity], w.Gauges[sample.WaitingDeferred] = window.Some(3.0), window.Some(2.0)
		}, schema.StateKVBound},
		{"deferred with a free cache and a quiet GPU is not queue_bound", func(w *window.ServerWindow) {
			w.KVCacheUsage, w.GPUUtil = window.Some(0.3), window.Some(50.0)
			w.Gauges[sample.WaitingCapacity], w.Gauges[sample.WaitingDeferred] = window.Some(0.0), window.Some(5.0)
		}, schema.StateOK},
		{"asleep", func(w *window.ServerWindow) {
			*w = window.ServerWindow{ExactTokens: window.Some(0.0), Running: window.Some(0.0)}
			w.Gauges[sample.Awake] = window.Some(0.0)
		}, schema.StateSleeping},
		{"awake and idle", func(w *window.ServerWindow) {
			*w = window.ServerWindow{ExactTokens: window.Some(0.0), Running: window.Some(0.0)}
			w.Gauges[sample.Awake] = window.Some(1.0)
		}, schema.StateIdle},
		{"down wins over asleep", func(w *window.ServerWindow) {
			w.Down = true
			w.Gauges[sample.Awake] = window.Some(0.0)
		}, schema.StateDown},
	}
	for _, tt := range tests {
		w := full()
		tt.mod(&w)
		if got := State(w, DefaultThresholds); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
