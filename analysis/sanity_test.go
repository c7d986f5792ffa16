package analysis

import (
	"slices"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// healthy is a window no rule doubts: tokens flow on a busy GPU that says
// it is active, the counters agree.
func healthy() ServerWindow {
	var w window.ServerWindow
	w.GPUs = []string{"0"}
	w.ExactTokens, w.SystemTPS = window.Some(5000.0), window.Some(500.0)
	w.GPUUtil, w.GPUUtilMax, w.SMActive = window.Some(98.0), window.Some(100.0), window.Some(0.7)
	w.Counts[sample.GenerationTokens] = count(100000, 5000, 500)
	w.Counts[sample.CompletionTokens] = count(98000, 4000, 400)
	w.Counts[sample.PrefixQueries] = count(50000, 5000, 500)
	w.Counts[sample.PrefixHits] = count(20000, 2000, 200)
	return ServerWindow{ServerWindow: w}
}

// TestSanityRules: each rule fires on the window that shows its lie
// (positive) and not on the nearest honest one (negative).
func TestSanityRules(t *testing.T) {
	tests := []struct {
		rule     string
		positive func(*ServerWindow)
		negative func(*ServerWindow)
		ceiling  float64
	}{
		{RuleActivityZero,
			func(a *ServerWindow) { a.SMActive = window.Some(0.0) },
			// An idle GPU reading 0 activity is honest.
			func(a *ServerWindow) {
				a.SMActive, a.GPUUtil, a.ExactTokens = window.Some(0.0), window.Some(3.0), window.Some(0.0)
			}, 0},
		{RuleGPUIdle,
			func(a *ServerWindow) {
				a.GPUUtil, a.GPUUtilMax, a.SMActive = window.Some(0.0), window.Some(0.0), window.Some(0.0)
			},
			// The GPU ran a little: attributed right, just light.
			func(a *ServerWindow) { a.GPUUtil, a.GPUUtilMax = window.Some(0.5), window.Some(3.0) }, 0},
		{RuleCounterAsRate,
			func(a *ServerWindow) { a.CountersDoubted = true },
			func(a *ServerWindow) { a.CountersDoubted = false }, 0},
		{RuleCompletionDrift,
			func(a *ServerWindow) { a.Counts[sample.CompletionTokens] = count(120000, 4000, 400) },
			// A built live counter starts with tpsmon: its total is not the engine's.
			func(a *ServerWindow) {
				a.Counts[sample.CompletionTokens] = count(120000, 4000, 400)
				a.Counts[sample.GenerationTokens] = window.Count{Delta: 5000, Total: 6000, OK: true, Derived: true}
			}, 0},
		{RulePrefixHitsFlat,
			func(a *ServerWindow) {
				a.Counts[sample.PrefixHits] = count(20000, 0, 0)
				a.PromptCachedTokens = window.Some(int64(800)) // the split saw hits
			},
			// The split agrees nothing was cached: a workload without shared prefixes.
			func(a *ServerWindow) {
				a.Counts[sample.PrefixHits] = count(20000, 0, 0)
				a.PromptCachedTokens = window.Some(int64(0))
			}, 0},
		{RuleAboveCeiling,
			func(a *ServerWindow) { a.SystemTPS = window.Some(600.0) },
			func(a *ServerWindow) { a.SystemTPS = window.Some(540.0) }, 500},
	}
	base := healthy()
	sanity(&base, window.Some(1e9))
	if base.Suspect.OK {
		t.Fatalf("the healthy window is suspect: %v", base.Suspect)
	}
	for _, tt := range tests {
		ceiling := window.Opt[float64]{}
		if tt.ceiling > 0 {
			ceiling = window.Some(tt.ceiling)
		}
		pos, neg := healthy(), healthy()
		tt.positive(&pos)
		tt.negative(&neg)
		sanity(&pos, ceiling)
		sanity(&neg, ceiling)
		if !slices.Contains(strings.Split(pos.Suspect.V, ","), tt.rule) {
			t.Errorf("%s: positive case suspect %v, want the rule", tt.rule, pos.Suspect)
		}
		if slices.Contains(strings.Split(neg.Suspect.V, ","), tt.rule) {
			t.Errorf("%s: negative case suspect %v, want without the rule", tt.rule, neg.Suspect)
		}
	}
}

// TestSuspectKeepsValues: a suspect window's values are written as read,
// and several rules join in Rules' order.
func TestSuspectKeepsValues(t *testing.T) {
	a := healthy()
	a.SMActive = window.Some(0.0)
	a.CountersDoubted = true
	before := a.ServerWindow
	sanity(&a, window.Opt[float64]{})
	if want := RuleActivityZero + "," + RuleCounterAsRate; a.Suspect != window.Some(want) {
		t.Errorf("suspect %v, want %q", a.Suspect, want)
	}
	if a.SystemTPS != before.SystemTPS || a.SMActive != before.SMActive || a.ExactTokens != before.ExactTokens {
		t.Errorf("values changed: %+v -> %+v", before, a.ServerWindow)
	}
}

// TestCeilingAbsentNeverFires: without a ceiling the rule is silent,
// however fast the server.
func TestCeilingAbsentNeverFires(t *testing.T) {
	if aboveCeiling(window.Some(1e7), window.Opt[float64]{}) {
		t.Error("fired without a ceiling")
	}
}

// TestActivityZeroPerGPU: the rule per GPU, through Analyze. One of a
// server's two GPUs reads SM activity 0 at 98 % utilization while its mean
// activity (0.35) hides it: the rule fires and names that GPU (positive).
// Negative: the same stuck reading on a GPU of another host, and on one
// the server does not use, and an idle GPU's honest 0.
func TestActivityZeroPerGPU(t *testing.T) {
	gpu := func(host, label string, util, sm float64) window.GPUWindow {
		return window.GPUWindow{Host: host, Label: label, Util: window.Some(util), SMActive: window.Some(sm)}
	}
	tests := []struct {
		name  string
		gpus  []window.GPUWindow
		stuck []string
	}{
		{"one GPU of two stuck", []window.GPUWindow{gpu("h", "0", 98, 0), gpu("h", "1", 97, 0.7)}, []string{"0"}},
		{"stuck on another host", []window.GPUWindow{gpu("other", "0", 98, 0), gpu("h", "1", 97, 0.7)}, nil},
		{"stuck on a GPU not the server's", []window.GPUWindow{gpu("h", "2", 98, 0), gpu("h", "1", 97, 0.7)}, nil},
		{"idle GPU honest", []window.GPUWindow{gpu("h", "0", 3, 0), gpu("h", "1", 97, 0.7)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := healthy().ServerWindow
			w.Host, w.GPUs, w.SMActive = "h", []string{"0", "1"}, window.Some(0.35)
			cs := Analyze([]window.Closed{{GPUs: tt.gpus, Servers: []window.ServerWindow{w}}}, &Facts{})
			a := cs[0].Servers[0]
			if !slices.Equal(a.StuckGPUs, tt.stuck) {
				t.Errorf("stuck GPUs %v, want %v", a.StuckGPUs, tt.stuck)
			}
			if fired := a.Suspect.OK && strings.Contains(a.Suspect.V, RuleActivityZero); fired != (tt.stuck != nil) {
				t.Errorf("suspect %v, want activity_zero %v", a.Suspect, tt.stuck != nil)
			}
		})
	}
}
