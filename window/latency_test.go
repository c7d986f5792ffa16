package window

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// histSample is a scrape carrying a TTFT histogram with edges 0.1, 1, +Inf.
func histSample(t float64, c01, c1, inf float64) sample.Server {
	s := reading(scrape{t: t, tokens: 100 * t, running: 1})
	s.SetHist(sample.HistTTFT, sample.Histogram{Sum: inf, Buckets: []sample.HistBucket{
		{Le: 0.1, Count: c01}, {Le: 1, Count: c1}, {Le: math.Inf(1), Count: inf}}})
	return s
}

// TestHistogramDeltas: a window holds the buckets' growth over it, shared
// by time between the windows a scrape interval straddles; a reset or a
// change of buckets makes the windows it touches unknown, with the reason.
func TestHistogramDeltas(t *testing.T) {
	j := newJoiner(0)
	// 10 observations a second, 2 of them ≤ 0.1 s and 7 ≤ 1 s; a scrape
	// every 2 s, one at 9 and 11 s (straddling the edge at 10 s).
	for _, ts := range []float64{0, 2, 4, 6, 8, 9, 11, 13, 15, 17, 19, 21} {
		j.AddServer("llm", histSample(ts, 2*ts, 7*ts, 10*ts))
	}
	// At 23 s the server restarts: counts fall.
	j.AddServer("llm", histSample(23, 1, 2, 3))
	j.AddServer("llm", histSample(25, 3, 6, 9))
	// At 29 s it came back with other buckets.
	s := reading(scrape{t: 29, tokens: 2900, running: 1})
	s.SetHist(sample.HistTTFT, sample.Histogram{Buckets: []sample.HistBucket{{Le: 0.5, Count: 1}, {Le: math.Inf(1), Count: 1}}})
	j.AddServer("llm", s)
	ws := servers(j.Flush(at(100)))
	if len(ws) < 3 {
		t.Fatalf("%d windows", len(ws))
	}
	for i, want := range []float64{100, 100} {
		h := ws[i].Latency.Hists[sample.HistTTFT]
		if !h.OK || math.Abs(h.Total()-want) > 1e-9 || math.Abs(h.Count[0]-want/5) > 1e-9 || math.Abs(h.Count[1]-want*0.7) > 1e-9 {
			t.Errorf("window %d: %+v, want %g observations", i, h, want)
		}
		if !h.HasSum || math.Abs(h.Sum-want) > 1e-9 {
			t.Errorf("window %d: sum %g, want %g", i, h.Sum, want)
		}
	}
	h := ws[2].Latency.Hists[sample.HistTTFT]
	if h.OK || !strings.Contains(h.Err, "reset") {
		t.Errorf("window with a reset: %+v, want the reset said", h)
	}
	if ws[0].Latency.Hists[sample.HistITL].OK || ws[0].Latency.Hists[sample.HistITL].Err != "" {
		t.Errorf("a histogram the page lacks: %+v", ws[0].Latency.Hists[sample.HistITL])
	}

	j = newJoiner(0)
	j.AddServer("llm", histSample(1, 0, 0, 0))
	j.AddServer("llm", histSample(3, 1, 1, 1))
	s = reading(scrape{t: 5, tokens: 500, running: 1})
	s.SetHist(sample.HistTTFT, sample.Histogram{Buckets: []sample.HistBucket{{Le: 0.5, Count: 9}, {Le: 1, Count: 9}, {Le: math.Inf(1), Count: 9}}})
	j.AddServer("llm", s)
	if h := servers(j.Flush(at(100)))[0].Latency.Hists[sample.HistTTFT]; h.OK || !strings.Contains(h.Err, "buckets changed") {
		t.Errorf("buckets that changed: %+v", h)
	}
}

// TestSuspectForgetsHistograms: a suspect episode's rewind leaves the
// open windows' histograms unknown, as it does their counters.
func TestSuspectForgetsHistograms(t *testing.T) {
	j := newJoiner(0)
	j.AddServer("llm", histSample(1, 0, 0, 0))
	j.AddServer("llm", histSample(3, 1, 1, 1))
	s := histSample(5, 2, 2, 2)
	s.Rewind, s.Suspect = at(1), true
	j.AddServer("llm", s)
	if h := servers(j.Flush(at(100)))[0].Latency.Hists[sample.HistTTFT]; h.OK || !strings.Contains(h.Err, "doubt") {
		t.Errorf("after a rewind: %+v", h)
	}
}

// TestRequestsInTheirEndWindow: a request's own latencies go to the window
// its line ended in, once, however long it ran.
func TestRequestsInTheirEndWindow(t *testing.T) {
	j := New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Start: at(0)},
		[]Server{{Name: "llm", Engine: "llamacpp", Source: "log"}})
	req := func(start, end float64, ttft float64) sample.Interval {
		iv := sample.Unknown(at(start), at(end))
		iv.Tokens, iv.Output, iv.Request, iv.TTFT, iv.TPOT = 10, 10, true, ttft, 0.01
		return iv
	}
	j.AddLog("llm", req(1, 12, 0.5))   // ends in the second window
	j.AddLog("llm", req(3, 10, 0.25))  // ends on the edge: the first window's (Start, End]
	j.AddLog("llm", req(14, 19, 0.75)) // second
	prompt := sample.Unknown(at(2), at(2.1))
	prompt.PromptTokens = 5
	j.AddLog("llm", prompt) // no latencies: not a request of the window
	ws := servers(j.Flush(at(100)))
	got := [][]float64{}
	for _, w := range ws[:2] {
		var ttfts []float64
		for _, r := range w.Latency.Requests {
			ttfts = append(ttfts, r.TTFT)
			if r.E2E != -1 || r.Tokens != 10 {
				t.Errorf("request %+v: e2e unknown and 10 tokens wanted", r)
			}
		}
		got = append(got, ttfts)
	}
	if len(got[0]) != 1 || got[0][0] != 0.25 || len(got[1]) != 2 || got[1][0] != 0.5 || got[1][1] != 0.75 {
		t.Fatalf("requests by window: %v", got)
	}
}

// TestFailedRequestInItsWindow: a failed request (a TGI error line) is a
// request of the window it ended in, and adds no
// token, no running request and no observed time.
func TestFailedRequestInItsWindow(t *testing.T) {
	j := New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Start: at(0)},
		[]Server{{Name: "tgi", Engine: "tgi", Source: "log"}})
	ok := sample.Unknown(at(1), at(4))
	ok.Tokens, ok.Output, ok.Request, ok.TPOT, ok.Observed = 30, 30, true, 0.1, true
	j.AddLog("tgi", ok)
	for _, s := range []float64{5, 15} {
		failed := sample.Unknown(at(s), at(s))
		failed.Failed = true
		j.AddLog("tgi", failed)
	}
	ws := servers(j.Flush(at(100)))
	var fails []int
	for _, w := range ws[:2] {
		n := 0
		for _, r := range w.Latency.Requests {
			if r.Failed {
				n++
				if r.TTFT != -1 || r.TPOT != -1 || r.E2E != -1 || r.Tokens != -1 {
					t.Errorf("failed request %+v: no times or tokens wanted", r)
				}
			}
		}
		fails = append(fails, n)
	}
	if fails[0] != 1 || fails[1] != 1 || len(ws[0].Latency.Requests) != 2 {
		t.Fatalf("failed requests by window %v, first window's requests %d: want [1 1] and 2", fails, len(ws[0].Latency.Requests))
	}
	if got := ws[0].Tokens; !got.OK || got.V != 30 {
		t.Errorf("first window's tokens %+v, want 30", got)
	}
	if got := ws[1].Tokens; got.OK && got.V != 0 {
		t.Errorf("second window holds only a failure: no tokens wanted, got %+v", got)
	}
}
