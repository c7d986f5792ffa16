package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// TestPageValuesGuarded reads hostile vLLM pages: the bad value is refused
// with its reason, the rest of the page is kept, a series printed twice
// is read once.
func TestPageValuesGuarded(t *testing.T) {
	page := func(gen, running string) string {
		return "vllm:generation_tokens_total{model_name=\"m\"} " + gen + "\n" +
			"vllm:num_requests_running{model_name=\"m\"} " + running + "\n"
	}
	tests := []struct {
		name        string
		second      string // the second page
		wantGen     bool
		wantRunning float64
		want        []sample.Discard
	}{
		{"NaN counter", page("NaN", "4"), false, 4, []sample.Discard{{Series: "generation_tokens", Reason: sample.NotANumber}}},
		{"+Inf counter", page("+Inf", "4"), false, 4, []sample.Discard{{Series: "generation_tokens", Reason: sample.Infinite}}},
		{"negative counter", page("-5", "4"), false, 4, []sample.Discard{{Series: "generation_tokens", Reason: sample.Negative}}},
		{"1e20 counter", page("1e20", "4"), false, 4, []sample.Discard{{Series: "generation_tokens", Reason: sample.Huge}}},
		{"jump", page("1e12", "4"), false, 4, []sample.Discard{{Series: "generation_tokens", Reason: sample.Jump}}},
		{"NaN gauge", page("1100", "NaN"), true, -1, []sample.Discard{{Series: "running", Reason: sample.NotANumber}}},
		{"huge gauge", page("1100", "1e9"), true, -1, []sample.Discard{{Series: "running", Reason: sample.Huge}}},
		{"duplicate series", page("1100", "4") + "vllm:num_requests_running{model_name=\"m\"} 4\n", true, 4, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var der Deriver
			first, err := VLLM.Parse(strings.NewReader(page("1000", "4")))
			if err != nil {
				t.Fatal(err)
			}
			first.Time = time.Unix(1000, 0)
			der.Derive(first)
			s, err := VLLM.Parse(strings.NewReader(tc.second))
			if err != nil {
				t.Fatal(err)
			}
			s.Time = time.Unix(1001, 0)
			s = der.Derive(s)
			if s.HasCounter[sample.GenerationTokens] != tc.wantGen {
				t.Errorf("generation counter kept: %v, want %v", s.HasCounter[sample.GenerationTokens], tc.wantGen)
			}
			running := -1.0
			if s.HasGauge[sample.Running] {
				running = s.Gauge[sample.Running]
			}
			if running != tc.wantRunning {
				t.Errorf("running %v, want %v", running, tc.wantRunning)
			}
			if len(s.Discards) != len(tc.want) {
				t.Fatalf("discards %v, want %v", s.Discards, tc.want)
			}
			for i := range tc.want {
				if s.Discards[i] != tc.want[i] {
					t.Errorf("discard %d: %v, want %v", i, s.Discards[i], tc.want[i])
				}
			}
			// Only a lost counter costs the sample its coverage; a lost
			// gauge costs itself.
			if lostCounter := !tc.wantGen; lostCounter != (s.Discarded > 0) {
				t.Errorf("Discarded %d", s.Discarded)
			}
		})
	}
}

// TestJumpRebase: a counter that really moved to a new level (three
// readings agreeing with each other) is followed again from there, the
// step not counted.
func TestJumpRebase(t *testing.T) {
	var g Guard
	reads := []float64{1000, 1100, 5e13, 5e13 + 100, 5e13 + 200, 5e13 + 300}
	var passed []float64
	for i, v := range reads {
		s := sample.Server{Time: time.Unix(int64(1000+i), 0)}
		s.SetCounter(sample.GenerationTokens, v)
		g.Check(&s)
		if s.HasCounter[sample.GenerationTokens] {
			passed = append(passed, s.Counter[sample.GenerationTokens])
		}
	}
	want := []float64{1000, 1100, 1100, 1200}
	if len(passed) != len(want) {
		t.Fatalf("passed %v, want %v", passed, want)
	}
	for i := range want {
		if passed[i] != want[i] {
			t.Fatalf("passed %v, want %v", passed, want)
		}
	}
}
