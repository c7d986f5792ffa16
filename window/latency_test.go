package window

import (
	"math"
	"slices"
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

// TestHeldReadingsBracketEdges: a scraper that reads the histograms only
// on each window's first page and on the page held from just before it
// (collector.Scraper.Window) gives every window the growth that reading
// every page gives, however unevenly the observations came within it; a
// silence among the held samples leaves its stretch out, as one between
// readings does.
func TestHeldReadingsBracketEdges(t *testing.T) {
	// Cumulative observations at t: uneven, so a stretch spread over the
	// wrong windows shows.
	obs := func(t float64) float64 { return 10*t + 4*math.Sin(t) + float64(int(t)%7) }
	hist := func(ts float64) sample.Server { return histSample(ts, obs(ts)/5, obs(ts)*0.7, obs(ts)) }
	held := func(ts float64) sample.Server {
		s := reading(scrape{t: ts, tokens: 100 * ts, running: 1})
		s.HistsHeld = true
		return s
	}
	type step struct {
		t    float64
		full bool // read with its histograms; else held, and read if the next full one or the end follows
	}
	every := func(from, to float64, fulls ...float64) []step {
		var out []step
		for ts := from; ts < to; ts++ {
			out = append(out, step{t: ts, full: slices.Contains(fulls, ts)})
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		steps []step
		// ref are the times a scraper reading every page read; nil: the
		// steps' times.
		ref []float64
		// want, where set, is window 0's observations instead of the
		// reference's.
		want float64
	}{
		{name: "a scrape a second, the first of each window read", steps: every(0.5, 30, 0.5, 10.5, 20.5)},
		{name: "the edges fall between late and early pages", steps: every(0.9, 40, 0.9, 10.9, 20.9, 30.9)},
		{name: "after a failure the next page is read, and the one held before it",
			// 3.5 to 5.5 failed: 2.5 was read then (held), 6.5 read in full.
			steps: append(append(every(0.5, 3, 0.5), every(6.5, 9, 6.5)...), every(9.5, 20, 10.5)...)},
		{name: "a silence among held samples leaves the whole stretch out",
			steps: append(append(every(0.5, 3, 0.5), every(6.5, 10, -1)...), every(10.5, 20, 10.5)...),
			want:  (obs(10.5) - obs(9.5)) / 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ref, got := newJoiner(0), newJoiner(0)
			refTimes := tt.ref
			if refTimes == nil {
				for _, st := range tt.steps {
					refTimes = append(refTimes, st.t)
				}
			}
			for _, ts := range refTimes {
				ref.AddServer("llm", hist(ts))
			}
			last := -1.0 // the held page not read yet
			for i, st := range tt.steps {
				if st.full {
					if last >= 0 {
						got.AddHeld("llm", hist(last))
					}
					got.AddServer("llm", hist(st.t))
					last = -1
					continue
				}
				got.AddServer("llm", held(st.t))
				last = st.t
				// A failure after it: the steps go on more than 2.5 s later.
				if i+1 < len(tt.steps) && tt.steps[i+1].t-st.t > 2.5 && tt.steps[i+1].full {
					got.AddHeld("llm", hist(last))
					last = -1
				}
			}
			if last >= 0 {
				got.AddHeld("llm", hist(last)) // the scraper stopped
			}
			rw, gw := servers(ref.Close(at(100))), servers(got.Close(at(100)))
			if len(rw) != len(gw) || len(gw) < 2 {
				t.Fatalf("%d windows, reading every page %d", len(gw), len(rw))
			}
			for i := range gw {
				r, g := rw[i].Latency.Hists[sample.HistTTFT], gw[i].Latency.Hists[sample.HistTTFT]
				if i == 0 && tt.want != 0 {
					if !g.OK || math.Abs(g.Total()-tt.want) > 1e-9 {
						t.Errorf("window 0: %g observations, want %g: %+v", g.Total(), tt.want, g)
					}
					continue
				}
				if r.OK != g.OK || r.Err != g.Err || len(r.Count) != len(g.Count) || math.Abs(r.Sum-g.Sum) > 1e-9 {
					t.Fatalf("window %d: %+v, reading every page %+v", i, g, r)
				}
				for k := range g.Count {
					if math.Abs(r.Count[k]-g.Count[k]) > 1e-9 {
						t.Errorf("window %d bucket %d: %g, reading every page %g", i, k, g.Count[k], r.Count[k])
					}
				}
				if r.OK && r.Total() == 0 {
					t.Errorf("window %d observed nothing: the case tests nothing", i)
				}
			}
		})
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

// TestRequestsPastTheBound: a window keeps up to MaxRequests requests; one
// past it keeps none and says how many ended in it, its tokens all
// counted, and the window after it, on the same recycled accumulator,
// keeps its own again.
func TestRequestsPastTheBound(t *testing.T) {
	j := New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Start: at(0)},
		[]Server{{Name: "llm", Engine: "llamacpp", Source: "log"}})
	windows := []struct{ n, kept, unkept int }{
		{MaxRequests, MaxRequests, 0},
		{MaxRequests + 5, 0, MaxRequests + 5},
		{3, 3, 0},
	}
	var ws []ServerWindow
	for w, tt := range windows {
		for i := range tt.n {
			end := float64(10*w) + 1 + 8*float64(i)/float64(tt.n)
			iv := sample.Unknown(at(end-0.5), at(end))
			iv.Tokens, iv.Output, iv.Request, iv.TTFT = 2, 2, true, float64(1000*w)+float64(i)/float64(tt.n)
			j.AddLog("llm", iv)
		}
		// Each window closes before the next one's requests come: its
		// accumulator is the next one's.
		ws = append(ws, servers(j.Flush(at(float64(10*(w+1))+5)))...)
	}
	if len(ws) != len(windows) {
		t.Fatalf("%d windows closed, want %d", len(ws), len(windows))
	}
	for w, tt := range windows {
		l := ws[w].Latency
		if len(l.Requests) != tt.kept || l.Unkept != tt.unkept {
			t.Errorf("window %d: %d requests kept, %d unkept; want %d and %d", w, len(l.Requests), l.Unkept, tt.kept, tt.unkept)
		}
		if got := ws[w].Tokens; !got.OK || got.V != int64(2*tt.n) {
			t.Errorf("window %d: tokens %+v, want %d", w, got, 2*tt.n)
		}
		for i, r := range l.Requests {
			if want := float64(1000*w) + float64(i)/float64(tt.n); r.TTFT != want {
				t.Fatalf("window %d: request %d has TTFT %g, want its own %g", w, i, r.TTFT, want)
			}
		}
	}
}
