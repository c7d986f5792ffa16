package window

import (
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
)

// A refused log line's stretch (sample.Hole) is not observed, whatever
// else says it was: the log found readable every second, or a valid
// line's interval beside it. A window that is all hole is down, with no
// tokens; one that is part hole is observed for the rest, its rate over
// that part. A hole in a window already closed changes nothing.
func TestJoinerHoles(t *testing.T) {
	stat := func(from, to, tokens float64) sample.Interval {
		iv := sample.Unknown(at(from), at(to))
		iv.Tokens, iv.Running = tokens, 2
		return iv
	}
	tests := []struct {
		name     string
		ivs      []sample.Interval
		tokens   Opt[int64]
		coverage float64
		down     bool // no source spoke for it
	}{
		{"no hole", []sample.Interval{stat(10, 20, 100)}, Some[int64](100), 1, false},
		{"all hole", []sample.Interval{sample.Hole(at(5), at(25))}, Opt[int64]{}, 0, true},
		{"half hole", []sample.Interval{stat(5, 15, 100), sample.Hole(at(15), at(25))}, Some[int64](50), 0.5, false},
		{"hole over a valid line", []sample.Interval{stat(10, 20, 100), sample.Hole(at(12), at(14)),
			sample.Hole(at(13), at(16))}, Some[int64](100), 0.6, false},
		{"hole before the first window", []sample.Interval{stat(10, 20, 100), sample.Hole(at(0), at(10))}, Some[int64](100), 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Start: at(10)},
				[]Server{{Name: "llm", Engine: "vllm", Source: schema.SourceLog}})
			for s := 0; s <= 30; s++ {
				j.Watch("llm", at(float64(s)))
			}
			for _, iv := range tc.ivs {
				j.AddLog("llm", iv)
			}
			var w ServerWindow
			for _, sw := range servers(j.Close(at(30))) {
				if sw.Start.Equal(at(10)) {
					w = sw
				}
			}
			if w.Tokens != tc.tokens || w.Coverage != tc.coverage || w.Down != tc.down {
				t.Errorf("window at 10 s: tokens %v coverage %v down %v, want %v, %v, %v",
					w.Tokens, w.Coverage, w.Down, tc.tokens, tc.coverage, tc.down)
			}
		})
	}
}
