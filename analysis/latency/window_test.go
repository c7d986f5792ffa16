package latency

import (
	"math"
	"math/rand/v2"
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
		// A request that failed is a miss, and no value of the quantiles.
		{"a failed request", window.Latency{Requests: []window.RequestTimes{
			{TTFT: 0.5, TPOT: 0.01, E2E: 2, Queue: -1, Tokens: 100}, {TTFT: -1, TPOT: -1, E2E: -1, Queue: -1, Tokens: -1, Failed: true}}}, SourceRequests, false, 0.5, ""},
		{"only failed requests", window.Latency{Requests: []window.RequestTimes{
			{TTFT: -1, TPOT: -1, E2E: -1, Queue: -1, Tokens: -1, Failed: true}}}, SourceRequests, false, 0, ""},
		// More requests than a window keeps: said, no number.
		{"requests past the bound", window.Latency{Unkept: 70000}, SourceRequests, false, math.NaN(),
			"70000 requests ended in the window, more than the 65536"},
		// The engine's histograms still say what they say.
		{"requests past the bound, histograms", window.Latency{Unkept: 70000, Hists: [sample.NumHists]window.HistWindow{
			sample.HistTTFT: h(5, 18, 20)}}, SourceHistogram, true, 0.9, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Summarize(tc.l, o, 10)
			if s.Source != tc.source || s.TTFT[1].OK != tc.ttft90 || !strings.Contains(s.Reason, tc.reason) {
				t.Fatalf("Summarize = source %q ttft p90 %+v reason %q", s.Source, s.TTFT[1], s.Reason)
			}
			if s.Reason != "" {
				for _, q := range append(s.TTFT[:], append(s.ITL[:], append(s.E2E[:], append(s.Queue[:], s.PerUserTPS[:]...)...)...)...) {
					if q.OK || q.Bounded {
						t.Errorf("reason %q, yet quantile %+v", s.Reason, q)
					}
				}
			}
			if got := s.Attainment; math.IsNaN(tc.att) && got.OK || !math.IsNaN(tc.att) && (!got.OK || got.Lo != tc.att) {
				t.Fatalf("attainment %+v, want %g", got, tc.att)
			}
		})
	}
}

// TestSummarizeTTFTBasis: a window's ttft_basis is the narrowest of its
// requests that have a TTFT; none without one, none from histograms.
func TestSummarizeTTFTBasis(t *testing.T) {
	req := func(ttft float64, b sample.TTFTBasis) window.RequestTimes {
		return window.RequestTimes{TTFT: ttft, TPOT: 0.01, E2E: 2, Queue: -1, Tokens: 100, TTFTBasis: b}
	}
	for _, tc := range []struct {
		name string
		reqs []window.RequestTimes
		want string
	}{
		{"all from the HTTP handler", []window.RequestTimes{req(0.5, sample.TTFTHTTP), req(0.6, sample.TTFTHTTP)}, "http"},
		{"one from its slot: slot", []window.RequestTimes{req(0.5, sample.TTFTHTTP), req(0.6, sample.TTFTSlot)}, "slot"},
		{"one prefill only: prefill", []window.RequestTimes{req(0.5, sample.TTFTSlot), req(0.6, sample.TTFTPrefill)}, "prefill"},
		{"a request without a TTFT says nothing of it", []window.RequestTimes{req(0.5, sample.TTFTHTTP), req(-1, sample.TTFTPrefill)}, "http"},
		{"no TTFT: no basis", []window.RequestTimes{req(-1, sample.TTFTPrefill)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summarize(window.Latency{Requests: tc.reqs}, Objective{}, 10).TTFTBasis; got != tc.want {
				t.Errorf("TTFTBasis %q, want %q", got, tc.want)
			}
		})
	}
	h := window.HistWindow{OK: true, Le: []float64{0.1, 1, math.Inf(1)}, Count: []float64{5, 18, 20}}
	if got := Summarize(window.Latency{Hists: [sample.NumHists]window.HistWindow{sample.HistTTFT: h}}, Objective{}, 10).TTFTBasis; got != "" {
		t.Errorf("from a histogram: TTFTBasis %q, want none", got)
	}
}

// TestPerUserTPSFromSortedTPOT: a window's per-user TPS quantiles, read
// from its sorted TPOTs backwards, are those of the reciprocals sorted on
// their own, value for value, over random windows with unknown, zero and
// infinite TPOTs among them.
func TestPerUserTPSFromSortedTPOT(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	odd := []float64{-1, 0, math.Inf(1), 1e-300, 5e-3}
	for trial := range 500 {
		n := rng.IntN(40)
		rs := make([]window.RequestTimes, n)
		var tps []float64
		for i := range rs {
			tpot := rng.ExpFloat64() * 0.02
			if rng.IntN(5) == 0 {
				tpot = odd[rng.IntN(len(odd))]
			}
			rs[i] = window.RequestTimes{TTFT: -1, TPOT: tpot, E2E: -1, Queue: -1, Tokens: -1}
			if tpot > 0 {
				tps = append(tps, 1/tpot)
			}
		}
		var s Summary
		s.fromRequests(rs, Objective{})
		for i, q := range TPSQ {
			got, want := s.PerUserTPS[i], FromValues(tps, q)
			if got != want {
				t.Fatalf("trial %d, q %v: %+v, the reciprocals sorted give %+v", trial, q, got, want)
			}
		}
	}
}
