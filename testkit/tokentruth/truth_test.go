package tokentruth

import (
	"math"
	"testing"
	"time"
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
