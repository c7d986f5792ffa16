package collector

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// edgePage is a vLLM page at step k of a server whose requests come
// unevenly: its TTFT and E2E histograms grow by a different amount and
// shape every second, so growth put in the wrong window shows.
func edgePage(k int, replica bool) string {
	var b strings.Builder
	var more float64
	if replica {
		more = 40000 // another server behind the URL, up longer than the first
	}
	fmt.Fprintf(&b, "# HELP vllm:num_requests_running Number of requests.\n# TYPE vllm:num_requests_running gauge\n")
	fmt.Fprintf(&b, "vllm:num_requests_running{model_name=\"m\"} %d\n", 3+k%4)
	fmt.Fprintf(&b, "vllm:prompt_tokens_total{model_name=\"m\"} %d\n", 500*k)
	fmt.Fprintf(&b, "vllm:generation_tokens_total{model_name=\"m\"} %g\n", float64(90*k+k*k%17)+more)
	fmt.Fprintf(&b, "python_gc_objects_collected_total{generation=\"0\"} %d\n", 1000+k)
	for f, fam := range []string{"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"} {
		edges := []string{"0.05", "0.1", "0.5", "1.0", "5.0", "+Inf"}
		fmt.Fprintf(&b, "# TYPE %s histogram\n", fam)
		var n, sum float64
		for i := range edges {
			// Cumulative to step k: each second adds (m*7+f)%5+1
			// observations, a share of them at or below each edge
			// that moves with the second.
			n = 0
			for m := 1; m <= k; m++ {
				obs := float64((m*7+f)%5 + 1)
				n += math.Floor(obs * math.Min(1, float64(i+1+m%3)/float64(len(edges))))
			}
			fmt.Fprintf(&b, "%s_bucket{le=%q,model_name=\"m\"} %g\n", fam, edges[i], n+more/10)
		}
		for m := 1; m <= k; m++ {
			sum += float64((m*7+f)%5+1) * 0.3 * float64(1+m%4)
		}
		fmt.Fprintf(&b, "%s_sum{model_name=\"m\"} %g\n%s_count{model_name=\"m\"} %g\n", fam, sum+more/5, fam, n+more/10)
	}
	return b.String()
}

// everyOther is the steps from a to b, every other one.
func everyOther(a, b int) map[int]bool {
	out := map[int]bool{}
	for k := a; k < b; k += 2 {
		out[k] = true
	}
	return out
}

// TestHistsReadAtWindowEdges: a scraper told the window reads the
// histograms on two pages of each window (its first, and the one before
// it, held unread till then), after a failed scrape and when it stops,
// and the joiner's windows hold, bucket for bucket, what reading every
// page gives.
func TestHistsReadAtWindowEdges(t *testing.T) {
	const steps = 45
	for _, tt := range []struct {
		name    string
		offset  time.Duration // of the scrapes from whole seconds
		fail    map[int]bool  // steps whose scrape fails
		replica map[int]bool  // steps another server behind the URL answers
		stopAt  int           // the scrapers stop after this step
	}{
		{name: "steady", offset: 300 * time.Millisecond, stopAt: steps - 1},
		{name: "scrapes just before the edges", offset: 990 * time.Millisecond, stopAt: steps - 1},
		{name: "failures in a window and at its edges", offset: 500 * time.Millisecond,
			fail: map[int]bool{4: true, 9: true, 10: true, 21: true}, stopAt: steps - 1},
		{name: "an outage within a window, longer than the joiner's gap", offset: 400 * time.Millisecond,
			fail: map[int]bool{3: true, 4: true, 5: true, 6: true, 33: true, 34: true, 35: true}, stopAt: steps - 1},
		{name: "two servers behind the URL for a while", offset: 300 * time.Millisecond,
			replica: everyOther(12, 18), stopAt: steps - 1},
		{name: "stopped in a window", offset: 100 * time.Millisecond, stopAt: 36},
		{name: "an outage longer than a window and its grace", offset: 200 * time.Millisecond,
			fail: map[int]bool{14: true, 15: true, 16: true, 17: true, 18: true, 19: true, 20: true, 21: true, 22: true, 23: true,
				24: true, 25: true, 26: true}, stopAt: steps - 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var step atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				k := int(step.Load())
				if tt.fail[k] {
					http.Error(w, "busy", http.StatusServiceUnavailable)
					return
				}
				w.Write([]byte(edgePage(k, tt.replica[k])))
			}))
			defer srv.Close()
			base := time.Unix(1_700_000_000, 0).UTC()
			var now time.Time
			clock := func() time.Time { return now }
			type side struct {
				sc      *Scraper
				j       *window.Joiner
				held    int // samples whose histograms were left unread
				reads   int // histogram readings the joiner was given
				suspect int // samples whose counters were in doubt
				shut    []window.Closed
			}
			sides := make([]*side, 2)
			for i, w := range []time.Duration{0, 10 * time.Second} {
				sides[i] = &side{
					sc: &Scraper{Server: "llm", URL: srv.URL, Interval: time.Second, Dialect: &VLLM, Now: clock, Window: w},
					j: window.New(window.Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond,
						Start: base}, []window.Server{{Name: "llm", Engine: "vllm"}}),
				}
			}
			take := func(s *side, r Result) {
				if r.Held != nil {
					s.j.AddHeld(r.Server, *r.Held)
					s.reads++
				}
				if r.Err != nil {
					return
				}
				if r.Sample.Suspect {
					s.suspect++
				}
				if r.Sample.HistsHeld {
					s.held++
				} else if r.Sample.HasHist[sample.HistTTFT] {
					s.reads++
				}
				s.j.AddServer(r.Server, r.Sample)
			}
			for k := 0; k <= tt.stopAt; k++ {
				step.Store(int64(k))
				now = base.Add(time.Duration(k)*time.Second + tt.offset)
				for _, s := range sides {
					take(s, s.sc.scrape(context.Background()))
					s.shut = append(s.shut, s.j.Flush(now)...) // as the daemon's loop does
				}
			}
			for _, s := range sides {
				if h, ok := s.sc.Held(); ok {
					s.j.AddHeld("llm", h)
					s.reads++
				}
			}
			every, edges := sides[0], sides[1]
			if (every.suspect > 0) != (len(tt.replica) > 0) || edges.suspect != every.suspect {
				t.Fatalf("%d and %d samples suspect, with %d pages of another server", every.suspect, edges.suspect, len(tt.replica))
			}
			if every.held != 0 {
				t.Fatalf("reading every page, %d samples held their histograms", every.held)
			}
			// Two pages of a window's ten are read with the histograms,
			// one more after each failure, and every page whose counters
			// are in doubt.
			if edges.reads > 2*(tt.stopAt/10+2)+2*len(tt.fail)+every.suspect || edges.held < (tt.stopAt+1)/2 {
				t.Errorf("told the window: %d pages read with histograms, %d held, of %d", edges.reads, edges.held, tt.stopAt+1)
			}
			end := base.Add(time.Minute)
			want, got := append(every.shut, every.j.Close(end)...), append(edges.shut, edges.j.Close(end)...)
			if len(want) != len(got) || len(got) < 4 {
				t.Fatalf("%d windows, reading every page %d", len(got), len(want))
			}
			compared := 0
			for i := range got {
				for _, h := range []sample.Hist{sample.HistTTFT, sample.HistE2E} {
					w, g := want[i].Servers[0].Latency.Hists[h], got[i].Servers[0].Latency.Hists[h]
					// Unknown for the same reason; a counter's fall is told with
					// the readings it fell between, which differ.
					wErr, _, _ := strings.Cut(w.Err, ":")
					gErr, _, _ := strings.Cut(g.Err, ":")
					if w.OK != g.OK || wErr != gErr || len(w.Count) != len(g.Count) || math.Abs(w.Sum-g.Sum) > 1e-9 {
						t.Fatalf("window %d %v: %+v, reading every page %+v", i, h, g, w)
					}
					for b := range g.Count {
						if math.Abs(w.Count[b]-g.Count[b]) > 1e-9 {
							t.Errorf("window %d %v bucket %g: %g, reading every page %g", i, h, g.Le[b], g.Count[b], w.Count[b])
						}
					}
					if w.OK && w.Total() > 0 {
						compared++
					}
				}
			}
			if compared < 6 {
				t.Errorf("%d windows' histograms observed something: the case tests too little", compared)
			}
		})
	}
}
