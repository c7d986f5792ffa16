package tokentruth

import (
	"math"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/latency"
)

// TestAtScrapes holds the scrape-instant reading to its definition: the
// counts at the scrapes are exact, an edge between two is interpolated,
// an edge beyond them takes the nearest one's count.
func TestAtScrapes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Ten tokens in [0.1, 1): all in the first half of the scrape
	// interval [0, 2).
	var a Arrivals
	for i := range 10 {
		a = append(a, at(0.1+0.09*float64(i)))
	}
	a = a.Sorted()
	cases := []struct {
		name    string
		scrapes []float64
		start   float64
		want    float64
	}{
		{"edges on scrapes: exact", []float64{0, 1, 2}, 0, 10},
		{"edge inside an interval: spread evenly", []float64{0, 2}, 0, 5}, // window [0, 1)
		{"edge beyond the last scrape: its count", []float64{0, 0.5}, 0, 5},
		{"edges before the first scrape: nothing", []float64{0.5, 2}, -1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var sc []time.Time
			for _, s := range c.scrapes {
				sc = append(sc, at(s))
			}
			ws := a.AtScrapes(sc, []time.Time{at(c.start)}, time.Second)
			if len(ws) != 1 || math.Abs(ws[0].Tokens-c.want) > 1e-9 {
				t.Fatalf("got %+v, want %v tokens", ws, c.want)
			}
		})
	}
}

// TestBorderline: a request whose client-timed TPOT is within 5 % of the
// objective is on its border, either side; one further off, or one that
// failed, is not.
func TestBorderline(t *testing.T) {
	at := time.Date(2026, 12, 2, 8, 0, 1, 0, time.UTC)
	req := func(tpot time.Duration, ok bool) Request {
		r := Request{Start: at, OK: ok, Level: 1}
		for i := range 11 {
			r.Arrivals = append(r.Arrivals, at.Add(10*time.Millisecond+time.Duration(i)*tpot))
		}
		r.End = r.Arrivals[len(r.Arrivals)-1]
		return r
	}
	reqs := []Request{req(5700*time.Microsecond, true), req(6290*time.Microsecond, true), req(5600*time.Microsecond, true),
		req(6400*time.Microsecond, true), req(6000*time.Microsecond, false)}
	ws := Windows(reqs, 10*time.Second, latency.Objective{TPOT: 6 * time.Millisecond})
	if l := ws[at.Truncate(10*time.Second)]; l == nil || l.Requests != 5 || l.Borderline != 2 {
		t.Errorf("window %+v: want 5 requests, 2 on the border (5.7 and 6.29 ms of 6)", l)
	}
}
