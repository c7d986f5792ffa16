package latency_test

import (
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/window"
)

// rng is a deterministic xorshift: the same requests on every run.
type rng uint64

func (r *rng) next() float64 {
	*r ^= *r << 13
	*r ^= *r >> 7
	*r ^= *r << 17
	return float64(*r>>11) / (1 << 53)
}

// TestFakeVLLMHistograms drives a fake vLLM page with requests whose
// latencies are known, scrapes it every second through the scraper's
// parse and guard into the joiner, and holds every window's quantiles and
// attainment to the truth: each exact value lies in the bounds tpsmon
// gives, an exact one is exact, and nothing is made up for too few.
func TestFakeVLLMHistograms(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	const windows = 30
	r := rng(42)
	var reqs []vllmsim.Request
	// Every request starts and ends within one window, so the requests of
	// a window are one set for every histogram (a test's choice; the
	// engine observes TTFT at the first token).
	for w := range windows {
		ws := t0.Add(time.Duration(w) * 10 * time.Second)
		n := 5 + w*4 // from too few for a p90 to enough for a p99 past window 24
		for range n {
			start := ws.Add(time.Duration((0.05 + 2*r.next()) * float64(time.Second)))
			q := time.Duration(r.next() * r.next() * 2 * float64(time.Second))
			req := vllmsim.Request{Start: start, Queue: q,
				TTFT:         q + time.Duration((0.01+0.5*r.next())*float64(time.Second)),
				TPOT:         time.Duration((0.005 + 0.12*r.next()) * float64(time.Second)),
				OutputTokens: 2 + int(40*r.next()), Aborted: w%5 == 3 && r.next() < 0.2}
			for req.End().After(ws.Add(9500 * time.Millisecond)) {
				req.OutputTokens /= 2
			}
			reqs = append(reqs, req)
		}
	}
	page := vllmsim.Latencies{Model: "m", Requests: reqs}
	j := window.New(window.Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Start: t0},
		[]window.Server{{Name: "v", Engine: "vllm"}})
	var d collector.Deriver
	for sec := 0; sec <= windows*10; sec++ {
		at := t0.Add(time.Duration(sec) * time.Second)
		s, _, err := collector.ReadPage([]byte(page.Page(at)), &collector.VLLM)
		if err != nil {
			t.Fatal(err)
		}
		s.Time = at
		j.AddServer("v", d.Derive(s))
	}
	var ws []window.ServerWindow
	for _, c := range j.Flush(t0.Add(time.Duration(windows*10+100) * time.Second)) {
		ws = append(ws, c.Servers...)
	}
	// TTFT 2.5 s and TPOT 0.1 s sit on vLLM's default edges; 0.3 s does not.
	onEdges := latency.Objective{TTFT: 2500 * time.Millisecond, TPOT: 100 * time.Millisecond}
	offEdge := latency.Objective{TTFT: 300 * time.Millisecond}
	checked, exactSeen, boundsSeen, absentSeen := 0, 0, 0, 0
	for _, w := range ws[:windows] {
		var in []vllmsim.Request
		for _, rq := range reqs {
			if !rq.Start.Before(w.Start) && rq.Start.Before(w.Start.Add(10*time.Second)) {
				in = append(in, rq)
			}
		}
		ttft := make([]float64, len(in))
		for i, rq := range in {
			ttft[i] = rq.TTFT.Seconds()
		}
		for _, o := range []latency.Objective{onEdges, offEdge} {
			sum := latency.Summarize(w.Latency, o, 10)
			if sum.Source != latency.SourceHistogram {
				t.Fatalf("window %v: source %q", w.Start, sum.Source)
			}
			for i, q := range latency.TTFTQ {
				got := sum.TTFT[i]
				rank := q * float64(len(in))
				switch {
				case float64(len(in)) < latency.MinObservations(q):
					if got.OK || got.Bounded {
						t.Fatalf("window %v p%g of %d requests: %+v, want absent", w.Start, 100*q, len(in), got)
					}
					absentSeen++
				case !got.Bounded:
					t.Fatalf("window %v p%g: %+v", w.Start, 100*q, got)
				case got.Exact && atMost(ttft, got.Value) != rank:
					t.Fatalf("window %v p%g: exact %g, but %g of %d at most it", w.Start, 100*q, got.Value, atMost(ttft, got.Value), len(in))
				case !got.Exact && !(atMost(ttft, got.Lo) < rank && atMost(ttft, got.Hi) >= rank):
					t.Fatalf("window %v p%g: rank %g not in (%g, %g]", w.Start, 100*q, rank, got.Lo, got.Hi)
				default:
					checked++
				}
			}
			// The truth: requests that met every objective, aborted ones not.
			met := 0
			for _, rq := range in {
				if !rq.Aborted && rq.TTFT <= max(o.TTFT, 0) && (o.TPOT == 0 || rq.TPOT <= o.TPOT) {
					met++
				}
			}
			truth := float64(met) / float64(len(in))
			a := sum.Attainment
			if !a.OK || truth < a.Lo-1e-9 || truth > a.Hi+1e-9 {
				t.Fatalf("window %v %+v: attainment %g outside [%g, %g] (%s)", w.Start, o, truth, a.Lo, a.Hi, a.Reason)
			}
			aborted := false
			for _, rq := range in {
				aborted = aborted || rq.Aborted
			}
			if o == offEdge && a.Exact && a.Lo != truth {
				t.Fatalf("window %v: off the edges, exact %g against %g", w.Start, a.Lo, truth)
			}
			if o == onEdges && !aborted && a.Joint && a.Hi-a.Lo > 0 {
				boundsSeen++ // two marginals: Fréchet bounds
			}
			if a.Exact {
				exactSeen++
			}
			// Goodput: requests per second that met, within the bounds.
			if rate := float64(met) / 10; rate < sum.GoodputRPSLo-1e-9 || rate > sum.GoodputRPSHi+1e-9 {
				t.Fatalf("window %v: goodput %g outside [%g, %g]", w.Start, rate, sum.GoodputRPSLo, sum.GoodputRPSHi)
			}
		}
	}
	if checked < 100 || absentSeen == 0 || boundsSeen == 0 {
		t.Fatalf("checked %d quantiles, %d absent, %d joint bounds, %d exact attainments: the test saw too little", checked, absentSeen, boundsSeen, exactSeen)
	}
	t.Logf("%d quantiles held to the truth, %d absent for too few, %d joint bounds, %d exact attainments", checked, absentSeen, boundsSeen, exactSeen)
}

func atMost(xs []float64, v float64) float64 {
	n := 0.0
	for _, x := range xs {
		if x <= v+1e-12 {
			n++
		}
	}
	return n
}
