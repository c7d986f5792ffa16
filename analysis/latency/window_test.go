package latency

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// TestSummarize: what a window's counts make, from request lines and from
// histograms, and what they do not.
func TestSummarize(t *testing.T) {
	h := func(counts ...float64) window.HistWindow {
		return window.HistWindow{OK: true, Le: []float64{0.1, 1, math.Inf(1)}, Count: counts, Sum: counts[len(counts)-1] * 0.5, HasSum: true}
	}
	o := Objective{TTFT: time.Second}
	for _, tc := range []struct {
		name   string
		l      window.Latency
		source string
		ttft90 bool    // a p90 value
		att    float64 // NaN: none
		reason string
	}{
		{"nothing", window.Latency{}, "", false, math.NaN(), ""},
		{"only +Inf buckets: nothing to say", window.Latency{Hists: [sample.NumHists]window.HistWindow{
			sample.HistITL: {OK: true, Le: []float64{math.Inf(1)}, Count: []float64{50}}}}, "", false, math.NaN(), ""},
		{"histogram", window.Latency{Hists: [sample.NumHists]window.HistWindow{sample.HistTTFT: h(5, 18, 20)}}, SourceHistogram, true, 0.9, ""},
		{"reset said, no number", window.Latency{Hists: [sample.NumHists]window.HistWindow{
			sample.HistTTFT: {Err: "histogram counter reset: le 0.1 fell from 3 to 1"}}}, SourceHistogram, false, math.NaN(), "ttft: histogram counter reset"},
		{"too few for a p90", window.Latency{Hists: [sample.NumHists]window.HistWindow{sample.HistTTFT: h(2, 5, 5)}}, SourceHistogram, false, 1, ""},
		{"requests", window.Latency{Requests: []window.RequestTimes{
			{TTFT: 0.5, TPOT: 0.01, E2E: 2, Queue: -1, Tokens: 100}, {TTFT: 1.5, TPOT: 0.01, E2E: 3, Queue: -1, Tokens: 100}}}, SourceRequests, false, 0.5, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(tc.l, o, 10)
			if s.Source != tc.source || s.TTFT[1].OK != tc.ttft90 || !strings.Contains(s.Reason, tc.reason) {
				t.Fatalf("Summarize = source %q ttft p90 %+v reason %q", s.Source, s.TTFT[1], s.Reason)
			}
			if got := s.Attainment; math.IsNaN(tc.att) && got.OK || !math.IsNaN(tc.att) && (!got.OK || got.Lo != tc.att) {
				t.Fatalf("attainment %+v, want %g", got, tc.att)
			}
		})
	}
}
