package latency

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

var inf = math.Inf(1)

// hist builds a cumulative histogram from edges and cumulative counts, the
// last edge +Inf.
func hist(le []float64, cum ...float64) Histogram {
	h := Histogram{}
	for i, l := range le {
		h.Buckets = append(h.Buckets, Bucket{Le: l, Count: cum[i]})
	}
	return h
}

var edges = []float64{0.1, 0.5, 1, inf}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Histogram
		ok   bool
	}{
		{"cumulative", hist(edges, 1, 2, 3, 4), true},
		{"flat", hist(edges, 0, 0, 0, 0), true},
		{"interpolated shares within slop", hist(edges, 1, 2, 2-1e-12, 3), true},
		{"empty", Histogram{}, false},
		{"no +Inf", hist([]float64{0.1, 0.5}, 1, 2), false},
		{"edges not ascending", hist([]float64{0.5, 0.1, inf}, 1, 2, 3), false},
		{"repeated edge", hist([]float64{0.1, 0.1, inf}, 1, 2, 3), false},
		{"NaN edge", hist([]float64{math.NaN(), inf}, 1, 2), false},
		{"falling counts", hist(edges, 1, 3, 2, 4), false},
		{"negative count", hist(edges, -1, 0, 0, 0), false},
		{"NaN count", hist(edges, 1, math.NaN(), 2, 3), false},
		{"Inf count", hist(edges, 1, 2, 3, inf), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.h.Check()
			if (err == nil) != tc.ok {
				t.Fatalf("Check = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
		})
	}
}

func TestDelta(t *testing.T) {
	prev := hist(edges, 1, 2, 3, 4)
	for _, tc := range []struct {
		name string
		cur  Histogram
		want Histogram
		err  error
	}{
		{"growth", hist(edges, 3, 5, 6, 8), hist(edges, 2, 3, 3, 4), nil},
		{"no growth", hist(edges, 1, 2, 3, 4), hist(edges, 0, 0, 0, 0), nil},
		{"one bucket fell: reset", hist(edges, 0, 5, 6, 8), Histogram{}, ErrReset},
		{"all fell: reset", hist(edges, 0, 0, 1, 1), Histogram{}, ErrReset},
		{"an edge more", hist([]float64{0.1, 0.25, 0.5, 1, inf}, 1, 2, 2, 3, 4), Histogram{}, ErrLayout},
		{"an edge moved", hist([]float64{0.1, 0.6, 1, inf}, 1, 2, 3, 4), Histogram{}, ErrLayout},
		{"torn page: growth not cumulative", hist(edges, 3, 3, 4, 5), Histogram{}, ErrInvalid},
		{"later reading invalid", hist([]float64{0.1, 0.5}, 1, 2), Histogram{}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Delta(prev, tc.cur)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Delta error %v, want %v", err, tc.err)
			}
			if err == nil && !equalHist(got, tc.want) {
				t.Fatalf("Delta = %v, want %v", got, tc.want)
			}
		})
	}
}

func equalHist(a, b Histogram) bool {
	if len(a.Buckets) != len(b.Buckets) {
		return false
	}
	for i := range a.Buckets {
		if a.Buckets[i] != b.Buckets[i] {
			return false
		}
	}
	return true
}

func TestAdd(t *testing.T) {
	got, err := Add(hist(edges, 1, 2, 3, 4), hist(edges, 0, 1, 1, 1))
	if err != nil || !equalHist(got, hist(edges, 1, 3, 4, 5)) {
		t.Fatalf("Add = %v, %v", got, err)
	}
	if _, err := Add(hist(edges, 1, 2, 3, 4), hist([]float64{1, inf}, 1, 1)); !errors.Is(err, ErrLayout) {
		t.Fatalf("Add of two layouts: %v, want ErrLayout", err)
	}
	if _, err := Add(); err == nil {
		t.Fatal("Add of nothing: no error")
	}
}

func TestAtMost(t *testing.T) {
	h := hist(edges, 2, 6, 9, 10)
	for _, tc := range []struct {
		x      float64
		lo, hi float64
		exact  bool
	}{
		{0.05, 0, 2, false}, // inside the first bucket
		{0.1, 2, 2, true},   // on the first edge
		{0.3, 2, 6, false},  // between edges
		{0.5, 6, 6, true},   // on an edge
		{1, 9, 9, true},     // on the last finite edge
		{2, 9, 10, false},   // past it: the +Inf bucket may hold them
		{inf, 10, 10, true}, // everything
	} {
		lo, hi, exact := h.AtMost(tc.x)
		if lo != tc.lo || hi != tc.hi || exact != tc.exact {
			t.Errorf("AtMost(%g) = %g, %g, %v; want %g, %g, %v", tc.x, lo, hi, exact, tc.lo, tc.hi, tc.exact)
		}
	}
	// An empty first bucket: below its edge nothing, exactly.
	if lo, hi, exact := hist(edges, 0, 1, 1, 1).AtMost(0.05); lo != 0 || hi != 0 || !exact {
		t.Errorf("AtMost below an empty first bucket = %g, %g, %v", lo, hi, exact)
	}
}

func TestMinObservations(t *testing.T) {
	for q, want := range map[float64]float64{0.5: 2, 0.9: 10, 0.1: 10, 0.99: 100, 0.999: 1000} {
		if got := MinObservations(q); got != want {
			t.Errorf("MinObservations(%g) = %g, want %g", q, got, want)
		}
	}
}

func TestFromHistogram(t *testing.T) {
	ten := hist(edges, 2, 6, 9, 10) // 2 in (0,0.1], 4 in (0.1,0.5], 3 in (0.5,1], 1 above
	for _, tc := range []struct {
		name    string
		h       Histogram
		q       float64
		ok      bool
		value   float64
		lo, hi  float64
		exact   bool
		reason  string
		bounded bool
	}{
		{"median inside a bucket", ten, 0.5, true, 0.1 + 0.4*3.0/4, 0.1, 0.5, false, "", true},
		{"rank on an edge is exact", ten, 0.6, true, 0.5, 0.5, 0.5, true, "", true},
		{"rank just past the edge interpolates", ten, 0.61, true, 0.5 + 0.5*(6.1-6)/3, 0.5, 1, false, "", true},
		{"p90 on the last finite edge", ten, 0.9, true, 1, 1, 1, true, "", true},
		{"p90 in the first bucket from 0", hist(edges, 10, 10, 10, 10), 0.9, true, 0.09, 0, 0.1, false, "", true},
		{"p90 just above the last finite edge: no value", hist(edges, 2, 6, 8.9, 10), 0.9, false, 0, 1, inf, false, "above the last finite bucket edge 1", true},
		{"p99 of 100 in +Inf", hist(edges, 0, 0, 98, 100), 0.99, false, 0, 1, inf, false, "above the last finite", true},
		{"p99 of 100 on the last finite edge", hist(edges, 0, 0, 99, 100), 0.99, true, 1, 1, 1, true, "", true},
		{"p99 needs 100: 99.9 are too few", hist(edges, 0, 0, 99.9, 99.9), 0.99, false, 0, 0, 0, false, "needs 100", false},
		{"p90 of exactly 10", hist(edges, 0, 10, 10, 10), 0.9, true, 0.1 + 0.4*9/10.0, 0.1, 0.5, false, "", true},
		{"p90 of 9: too few", hist(edges, 0, 9, 9, 9), 0.9, false, 0, 0, 0, false, "needs 10", false},
		{"median of 2", hist(edges, 1, 2, 2, 2), 0.5, true, 0.1, 0.1, 0.1, true, "", true},
		{"median of 1: too few", hist(edges, 1, 1, 1, 1), 0.5, false, 0, 0, 0, false, "needs 2", false},
		{"no observations", hist(edges, 0, 0, 0, 0), 0.5, false, 0, 0, 0, false, "no observations", false},
		{"empty buckets are skipped", hist(edges, 0, 0, 4, 4), 0.5, true, 0.75, 0.5, 1, false, "", true},
		{"fractional counts", hist(edges, 0.5, 2.5, 2.5, 2.5), 0.5, true, 0.1 + 0.4*0.75/2, 0.1, 0.5, false, "", true},
		{"invalid histogram", hist(edges, 3, 2, 2, 2), 0.5, false, 0, 0, 0, false, "not a cumulative", false},
		{"q out of range", ten, 1, false, 0, 0, 0, false, "not between", false},
		{"only +Inf", hist([]float64{inf}, 20), 0.5, false, 0, 0, 0, false, "no finite bucket", false},
		{"first edge at 0: no lower bound", hist([]float64{0, 1, inf}, 5, 5, 5), 0.5, true, 0, math.Inf(-1), 0, false, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromHistogram(tc.h, tc.q)
			if got.OK != tc.ok || got.Exact != tc.exact || got.Bounded != tc.bounded {
				t.Fatalf("FromHistogram = %+v; want ok %v exact %v bounded %v", got, tc.ok, tc.exact, tc.bounded)
			}
			if tc.ok && math.Abs(got.Value-tc.value) > 1e-12 {
				t.Errorf("value %g, want %g", got.Value, tc.value)
			}
			if tc.bounded && (got.Lo != tc.lo || got.Hi != tc.hi) {
				t.Errorf("bounds (%g, %g], want (%g, %g]", got.Lo, got.Hi, tc.lo, tc.hi)
			}
			if tc.ok && !(got.Value >= got.Lo && got.Value <= got.Hi) {
				t.Errorf("value %g outside its bounds (%g, %g]", got.Value, got.Lo, got.Hi)
			}
			if !strings.Contains(got.Reason, tc.reason) || (tc.reason == "" && got.Reason != "") {
				t.Errorf("reason %q, want %q", got.Reason, tc.reason)
			}
		})
	}
}

func TestFromValues(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name   string
		vals   []float64
		q      float64
		ok     bool
		value  float64
		reason string
	}{
		// numpy.percentile([1,2,3,4], 50) = 2.5; ([1..10], 90) = 9.1
		{"median between ranks", []float64{4, 1, 3, 2}, 0.5, true, 2.5, ""},
		{"p90 of 10", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, true, 9.1, ""},
		{"p90 of 9: too few", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, 0.9, false, 0, "needs 10"},
		{"median of 2", []float64{1, 3}, 0.5, true, 2, ""},
		{"median of 1: too few", []float64{1}, 0.5, false, 0, "needs 2"},
		{"unknown values left out", []float64{1, nan, 3}, 0.5, true, 2, ""},
		{"unknown values do not count", []float64{1, nan}, 0.5, false, 0, "needs 2"},
		{"none", nil, 0.5, false, 0, "no observations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromValues(tc.vals, tc.q)
			if got.OK != tc.ok {
				t.Fatalf("FromValues = %+v, want ok %v", got, tc.ok)
			}
			if tc.ok && (math.Abs(got.Value-tc.value) > 1e-12 || !got.Exact || got.Lo != got.Value || got.Hi != got.Value) {
				t.Errorf("FromValues = %+v, want exact %g", got, tc.value)
			}
			if !strings.Contains(got.Reason, tc.reason) || (tc.reason == "" && got.Reason != "") {
				t.Errorf("reason %q, want %q", got.Reason, tc.reason)
			}
		})
	}
}

func TestReciprocal(t *testing.T) {
	// p90 TPOT interpolated in (0.01, 0.02]: p10 tokens/s in [50, 100).
	q := Quantile{Q: 0.9, Value: 0.016, OK: true, Lo: 0.01, Hi: 0.02, Bounded: true, N: 20}
	r := Reciprocal(q)
	if math.Abs(r.Q-0.1) > 1e-12 || r.Value != 62.5 || r.Lo != 50 || r.Hi != 100 || !r.OK {
		t.Fatalf("Reciprocal = %+v", r)
	}
	// p90 TPOT above the last edge 0.5: p10 tokens/s below 2, no value.
	r = Reciprocal(Quantile{Q: 0.9, Lo: 0.5, Hi: inf, Bounded: true, Reason: "above"})
	if r.OK || r.Lo != 0 || r.Hi != 2 {
		t.Fatalf("Reciprocal above the last edge = %+v", r)
	}
	// A time per token of 0 makes no speed.
	if r = Reciprocal(Quantile{Q: 0.5, OK: true, Exact: true}); r.OK {
		t.Fatalf("Reciprocal of 0 = %+v", r)
	}
}

func TestObjectiveValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Objective
		bad  string
	}{
		{"typical", Objective{TTFT: 2 * time.Second, TPOT: 100 * time.Millisecond}, ""},
		{"none", Objective{}, ""},
		{"an hour", Objective{E2E: time.Hour}, ""},
		{"just over an hour", Objective{E2E: time.Hour + time.Nanosecond}, "e2e"},
		{"negative tpot", Objective{TPOT: -time.Millisecond}, "tpot"},
		{"negative ttft", Objective{TTFT: -1}, "ttft"},
	} {
		err := tc.o.Validate()
		if (err == nil) != (tc.bad == "") || err != nil && (!errors.Is(err, ErrObjective) || !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("%s: Validate = %v, want naming %q", tc.name, err, tc.bad)
		}
	}
}

func TestFromRequests(t *testing.T) {
	nan := math.NaN()
	o := Objective{TTFT: time.Second, TPOT: 100 * time.Millisecond}
	ok := Request{TTFT: 0.5, TPOT: 0.05, E2E: 3, OutputTokens: 40}
	slowFirst := Request{TTFT: 1.5, TPOT: 0.05, E2E: 3, OutputTokens: 40}
	onLimit := Request{TTFT: 1, TPOT: 0.1, E2E: 3, OutputTokens: 10} // meets: ≤ the objective
	justOver := Request{TTFT: 1, TPOT: 0.1000001, E2E: 3, OutputTokens: 10}
	failed := ok
	failed.Failed = true
	unknown := Request{TTFT: nan, TPOT: 0.05, E2E: nan, OutputTokens: 20}
	for _, tc := range []struct {
		name       string
		reqs       []Request
		o          Objective
		lo, hi     float64
		tokLo      float64
		exact, hit bool
		reason     string
	}{
		{"all met", []Request{ok, ok}, o, 1, 1, 80, true, true, ""},
		{"one slow first token", []Request{ok, slowFirst}, o, 0.5, 0.5, 40, true, true, ""},
		{"on the objective meets", []Request{onLimit}, o, 1, 1, 10, true, true, ""},
		{"just over misses", []Request{justOver}, o, 0, 0, 0, true, true, ""},
		{"aborted is a miss", []Request{ok, failed}, o, 0.5, 0.5, 40, true, true, ""},
		{"unknown TTFT bounds it", []Request{ok, unknown}, o, 0.5, 1, 40, false, true, ""},
		{"unknown value not needed", []Request{ok, unknown}, Objective{TPOT: o.TPOT}, 1, 1, 60, true, true, ""},
		{"e2e only", []Request{ok, slowFirst}, Objective{E2E: 2 * time.Second}, 0, 0, 0, true, true, ""},
		{"no objective", []Request{ok}, Objective{}, 0, 0, 0, false, false, "no objective"},
		{"no requests", nil, o, 0, 0, 0, false, false, "no requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := FromRequests(tc.reqs, tc.o)
			if a.OK != tc.hit || a.Exact != tc.exact || !strings.Contains(a.Reason, tc.reason) {
				t.Fatalf("FromRequests = %+v", a)
			}
			if tc.hit && (a.Lo != tc.lo || a.Hi != tc.hi || a.GoodTokensLo != tc.tokLo) {
				t.Fatalf("FromRequests = [%g, %g] tokens %g; want [%g, %g] tokens %g", a.Lo, a.Hi, a.GoodTokensLo, tc.lo, tc.hi, tc.tokLo)
			}
		})
	}
	a := FromRequests([]Request{ok, slowFirst, ok, failed}, o)
	rpsLo, rpsHi, tpsLo, _ := a.Goodput(10)
	if rpsLo != 0.2 || rpsHi != 0.2 || tpsLo != 8 {
		t.Fatalf("Goodput = %g, %g, %g; want 0.2 req/s and 8 tokens/s", rpsLo, rpsHi, tpsLo)
	}
	if r, _, _, _ := (Attainment{}).Goodput(10); !math.IsNaN(r) {
		t.Fatalf("Goodput of no attainment = %g, want NaN", r)
	}
}

func TestFromHistograms(t *testing.T) {
	ttft := hist(edges, 2, 6, 9, 10) // 10 requests
	tpot := hist(edges, 7, 8, 10, 10)
	for _, tc := range []struct {
		name         string
		ms           []Marginal
		failed       float64
		lo, hi       float64
		exact, joint bool
		reason       string
	}{
		{"objective on an edge: exact", []Marginal{{H: ttft, Objective: 0.5, Kind: 0}}, 0, 0.6, 0.6, true, false, ""},
		{"objective between edges: bounds", []Marginal{{H: ttft, Objective: 0.3, Kind: 0}}, 0, 0.2, 0.6, false, false, ""},
		{"objective past the last edge: up to all", []Marginal{{H: ttft, Objective: 2, Kind: 0}}, 0, 0.9, 1, false, false, ""},
		{"joint: Fréchet bounds", []Marginal{{H: ttft, Objective: 0.5, Kind: 0}, {H: tpot, Objective: 0.1, Kind: 1}}, 0, 0.6 + 0.7 - 1, 0.6, false, true, ""},
		{"joint of disjoint-able shares starts at 0", []Marginal{{H: ttft, Objective: 0.1, Kind: 0}, {H: tpot, Objective: 0.1, Kind: 1}}, 0, 0, 0.2, false, true, ""},
		{"joint with one marginal at 1 is exact", []Marginal{{H: ttft, Objective: 0.5, Kind: 0}, {H: tpot, Objective: 1, Kind: 1}}, 0, 0.6, 0.6, true, true, ""},
		// failed: (6-2)/12 ≤ a ≤ max(min(6, 8)/10, 6/12)
		{"aborted requests widen it", []Marginal{{H: ttft, Objective: 0.5, Kind: 0}}, 2, 4.0 / 12, 0.6, false, false, ""},
		{"invalid histogram", []Marginal{{H: hist(edges, 3, 2, 2, 2), Objective: 0.5, Kind: 0}}, 0, 0, 0, false, false, "not a cumulative"},
		{"no requests", []Marginal{{H: hist(edges, 0, 0, 0, 0), Objective: 0.5, Kind: 0}}, 0, 0, 0, false, false, "no requests"},
		{"no objective", nil, 0, 0, 0, false, false, "no objective"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := FromHistograms(tc.ms, tc.failed)
			if a.OK != (tc.reason == "") || !strings.Contains(a.Reason, tc.reason) {
				t.Fatalf("FromHistograms = %+v, want reason %q", a, tc.reason)
			}
			if !a.OK {
				return
			}
			if math.Abs(a.Lo-tc.lo) > 1e-12 || math.Abs(a.Hi-tc.hi) > 1e-12 || a.Exact != tc.exact || a.Joint != tc.joint {
				t.Fatalf("FromHistograms = [%g, %g] exact %v joint %v; want [%g, %g] %v %v", a.Lo, a.Hi, a.Exact, a.Joint, tc.lo, tc.hi, tc.exact, tc.joint)
			}
			if !math.IsNaN(a.GoodTokensLo) {
				t.Fatalf("tokens of the requests that met are unknown from histograms, got %g", a.GoodTokensLo)
			}
		})
	}
}

// TestBoundsHoldTruth draws requests with known latencies, bins them into
// histograms, and holds every bound to the truth: the attainment the
// requests themselves give lies within what the histograms say.
func TestBoundsHoldTruth(t *testing.T) {
	le := []float64{0.05, 0.1, 0.2, 0.5, 1, 2, inf}
	bin := func(xs []float64) Histogram {
		h := Histogram{}
		for _, l := range le {
			n := 0.0
			for _, x := range xs {
				if x <= l {
					n++
				}
			}
			h.Buckets = append(h.Buckets, Bucket{Le: l, Count: n})
		}
		return h
	}
	seed := uint64(7)
	next := func() float64 { // xorshift: deterministic, no global state
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return float64(seed>>11) / (1 << 53)
	}
	for trial := range 200 {
		n := 10 + trial%50
		reqs := make([]Request, n)
		ttft, tpot := make([]float64, n), make([]float64, n)
		for i := range reqs {
			ttft[i] = 3 * next() * next()
			tpot[i] = 0.3 * next()
			reqs[i] = Request{TTFT: ttft[i], TPOT: tpot[i], E2E: math.NaN(), OutputTokens: 10}
		}
		o := Objective{TTFT: time.Duration((0.05 + 2*next()) * float64(time.Second)), TPOT: time.Duration(0.3 * next() * float64(time.Second))}
		truth := FromRequests(reqs, o)
		got := FromHistograms([]Marginal{{H: bin(ttft), Objective: o.TTFT.Seconds(), Kind: 0}, {H: bin(tpot), Objective: o.TPOT.Seconds(), Kind: 1}}, 0)
		if truth.Lo < got.Lo-1e-12 || truth.Lo > got.Hi+1e-12 {
			t.Fatalf("trial %d: truth %g outside the bounds [%g, %g]", trial, truth.Lo, got.Lo, got.Hi)
		}
		for _, q := range []float64{0.5, 0.9} {
			// What the estimate claims of the observations: the one of
			// rank q·n lies in (Lo, Hi]; exact, a share q is at most Value.
			est := FromHistogram(bin(ttft), q)
			atMost := func(x float64) float64 {
				c := 0.0
				for _, v := range ttft {
					if v <= x {
						c++
					}
				}
				return c
			}
			rank := q * float64(n)
			switch {
			case !est.Bounded:
				t.Fatalf("trial %d p%g: %+v", trial, q*100, est)
			case est.Exact && atMost(est.Value) != rank:
				t.Fatalf("trial %d p%g: exact %g, but %g of %d are at most it", trial, q*100, est.Value, atMost(est.Value), n)
			case !est.Exact && !(atMost(est.Lo) < rank && atMost(est.Hi) >= rank):
				t.Fatalf("trial %d p%g: rank %g not in (%g, %g]", trial, q*100, rank, est.Lo, est.Hi)
			}
		}
	}
}

func TestWhere(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		q, p, d float64
		want    string
	}{
		{3, 0.2, 1, "queue"},
		{0.1, 0.2, 1, "decode"},
		{nan, 2, 1, "prefill"},
		{nan, nan, nan, ""},
	} {
		if got := Where(tc.q, tc.p, tc.d); got != tc.want {
			t.Errorf("Where(%g, %g, %g) = %q, want %q", tc.q, tc.p, tc.d, got, tc.want)
		}
	}
}

func TestMissPhase(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		missed  [3]float64
		q, p, d float64
		want    string
	}{
		{[3]float64{0.3, 0.1, 0}, 2, 0.5, 10, "queue"},     // first tokens late, requests queued
		{[3]float64{0.3, 0.1, 0}, 0.1, 0.5, 10, "prefill"}, // first tokens late, long prompts
		{[3]float64{0.3, 0.1, 0}, nan, nan, 10, "prefill"}, // no phase times: still the first token's
		{[3]float64{0.1, 0.3, 0}, 2, 0.5, 10, "decode"},
		{[3]float64{0, 0, 0.2}, 2, 0.5, 10, "decode"}, // end to end: the longest phase
		{[3]float64{}, 2, 0.5, 10, ""},
	} {
		if got := MissPhase(Attainment{Missed: tc.missed}, tc.q, tc.p, tc.d); got != tc.want {
			t.Errorf("MissPhase(%v, %g, %g, %g) = %q, want %q", tc.missed, tc.q, tc.p, tc.d, got, tc.want)
		}
	}
}
