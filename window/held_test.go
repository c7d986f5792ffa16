package window

import (
	"math"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
)

// A log's request counts in running from when its server held it
// (Interval.Held: a llama.cpp request's slot, before its first token),
// time-weighted over each window it touches, that one before its tokens'
// span included; its tokens stay over (Start, End]. The part held in a
// window already closed is lost, not moved.
func TestJoinerRunningFromHeld(t *testing.T) {
	req := func(from, to, held, tokens float64) sample.Interval {
		iv := sample.Unknown(at(from), at(to))
		iv.Tokens, iv.Held, iv.Request = tokens, held, true
		return iv
	}
	type win struct {
		running  float64
		tokens   int64
		coverage float64
	}
	tests := []struct {
		name    string
		watched bool // the log found readable each second (live)
		ivs     []sample.Interval
		want    [2]win // the windows at 10 s and 20 s
	}{
		{"its decode only", true, []sample.Interval{req(12, 18, -1, 60)}, [2]win{{0.6, 60, 1}, {0, 0, 1}}},
		{"held from 11, its decode from 12", true, []sample.Interval{req(12, 18, 7, 60)}, [2]win{{0.7, 60, 1}, {0, 0, 1}}},
		{"held no longer than its decode: its decode", true, []sample.Interval{req(12, 18, 4, 60)}, [2]win{{0.6, 60, 1}, {0, 0, 1}}},
		{"held from before the window its tokens are in", true, []sample.Interval{req(21, 25, 6, 40)}, [2]win{{0.1, 0, 1}, {0.5, 40, 1}}},
		{"two requests, one straddling the edge", true, []sample.Interval{req(12, 18, 8, 60), req(20.5, 30, 11, 95)},
			[2]win{{0.8 + 0.1, 60, 1}, {1, 95, 1}}},
		{"held from before the first open window: what is open", true, []sample.Interval{req(12, 18, 10, 60)}, [2]win{{0.8, 60, 1}, {0, 0, 1}}},
		// Not watched (replay): the lines speak for the time the request
		// was held, in which it ran alone.
		{"only its lines: observed from its slot", false, []sample.Interval{req(21, 25, 6, 40)}, [2]win{{1, 0, 0.1}, {1, 40, 0.5}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Start: at(10)},
				[]Server{{Name: "llm", Engine: "llamacpp", Source: schema.SourceLog}})
			if tc.watched {
				for s := 0; s <= 40; s++ {
					j.Watch("llm", at(float64(s)))
				}
			}
			for _, iv := range tc.ivs {
				j.AddLog("llm", iv)
			}
			closed := servers(j.Close(at(40)))
			for i, w := range tc.want {
				var sw ServerWindow
				ok := false
				for _, c := range closed {
					if c.Start.Equal(at(float64(10 + 10*i))) {
						sw, ok = c, true
					}
				}
				if !ok {
					t.Fatalf("no window at %d s", 10+10*i)
				}
				tok := int64(-1)
				if sw.Tokens.OK {
					tok = sw.Tokens.V
				}
				if !sw.Running.OK || math.Abs(sw.Running.V-w.running) > 1e-9 || tok != w.tokens || math.Abs(sw.Coverage-w.coverage) > 1e-9 {
					t.Errorf("window at %d s: running %v, tokens %d, coverage %v; want %v, %d, %v", 10+10*i, sw.Running, tok, sw.Coverage,
						w.running, w.tokens, w.coverage)
				}
			}
		})
	}
}

// A request's prompt tokens spread over its slot before its first token,
// where it was held there, and over its decode otherwise: a prefill that
// fills a window shows its prompt there, not in the window of its tokens.
func TestJoinerPromptOverItsSlot(t *testing.T) {
	req := func(from, to, held, prompt float64) sample.Interval {
		iv := sample.Unknown(at(from), at(to))
		iv.Tokens, iv.PromptTokens, iv.Held, iv.Request = 10, prompt, held, true
		return iv
	}
	tests := []struct {
		name string
		iv   sample.Interval
		want [2]int64 // prompt tokens of the windows at 10 s and 20 s
	}{
		{"no slot time: over its decode", req(18, 22, -1, 100), [2]int64{50, 50}},
		{"prefill 15..21 s, decode 21..25 s", req(21, 25, 10, 600), [2]int64{500, 100}},
		{"prefill and decode in one window (none in the other: absent)", req(22, 28, 8, 600), [2]int64{-1, 600}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Start: at(10)},
				[]Server{{Name: "llm", Engine: "llamacpp", Source: schema.SourceLog}})
			for s := 0; s <= 40; s++ {
				j.Watch("llm", at(float64(s)))
			}
			j.AddLog("llm", tc.iv)
			var got [2]int64
			for _, c := range servers(j.Close(at(40))) {
				for i := range got {
					if c.Start.Equal(at(float64(10 + 10*i))) {
						got[i] = -1
						if c.PromptTokens.OK {
							got[i] = c.PromptTokens.V
						}
					}
				}
			}
			if got != tc.want {
				t.Errorf("prompt tokens of the windows at 10 s and 20 s: %v, want %v", got, tc.want)
			}
		})
	}
}
