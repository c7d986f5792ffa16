package curve

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/schema"
)

// within is |got - want| <= acc·|want|, with a little room for the
// interpolation's own rounding.
func within(got, want, acc float64) bool {
	return math.Abs(got-want) <= acc*math.Abs(want)+1e-12
}

// TestSketchQuantiles: quantiles read from a sketch lie within
// SketchAccuracy of the values' own, for any values; a sketch survives
// its text; two periods' sketches add up to the sketch of both.
func TestSketchQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 300; trial++ {
		var a, b dist
		n := 1 + rng.IntN(400)
		for i := 0; i < n; i++ {
			v := math.Pow(10, -3+9*rng.Float64()) // 1e-3 to 1e6
			switch rng.IntN(20) {
			case 0:
				v = 0
			case 1:
				v = 1e7 // the largest believable rate
			}
			if rng.IntN(2) == 0 {
				a = append(a, wv{v, 1})
			} else {
				b = append(b, wv{v, 1})
			}
		}
		sa, sb := sketchOf(a), sketchOf(b)
		for _, s := range []sketch{sa, sb} {
			back, err := parseSketch(s.String())
			if err != nil || back.String() != s.String() || back.zeros != s.zeros || back.lo != s.lo || len(back.counts) != len(s.counts) {
				t.Fatalf("sketch %q read back as %q (%v)", s.String(), back.String(), err)
			}
		}
		sa.merge(&sb)
		all := append(append(dist{}, a...), b...)
		if whole := sketchOf(all); whole.String() != sa.String() {
			t.Fatalf("merged %q, the whole's %q", sa.String(), whole.String())
		}
		qs := []float64{0, 0.1, 0.5, 0.9, 1}
		got, want := sa.dist().quantiles(qs...), all.quantiles(qs...)
		for i := range qs {
			if !within(got[i], want[i], SketchAccuracy) {
				t.Fatalf("trial %d, q%.1f of %d values: %v from the sketch, %v exact", trial, qs[i], len(all), got[i], want[i])
			}
		}
	}
}

// TestSketchText: what a sketch's text may not be.
func TestSketchText(t *testing.T) {
	for _, ok := range []string{"", "3z", "-5:1", "2z10:1//4/2"} {
		if s, err := parseSketch(ok); err != nil || s.String() != ok {
			t.Errorf("%q: %v, read back %q", ok, err, s.String())
		}
	}
	for _, bad := range []string{"z", "-1z", "NaNz3:1", "3", "3:", "3:x", "3:-1", "3:Inf", "99999:1", "-99999:1",
		"1500:" + strings.Repeat("1/", 200) + "1"} {
		if _, err := parseSketch(bad); err == nil {
			t.Errorf("%q read", bad)
		}
	}
}

// hourlyWindows are a server's windows over six hours whose rates drift
// hour by hour at each concurrency: a period's quantiles averaged over
// periods are then not the range's.
func hourlyWindows() (map[string]string, []time.Time, []Window) {
	tags := map[string]string{schema.TagHost: "h", schema.TagServer: "s", schema.TagEngine: "vllm"}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(3, 5))
	var ts []time.Time
	var ws []Window
	for h := 0; h < 6; h++ {
		for i := 0; i < 120; i++ {
			running := float64(1 + rng.IntN(6))
			user := (120 - 12*running) * (1 + 0.4*float64(h%3)) * (0.8 + 0.4*rng.Float64())
			w := win(running, user*running, user)
			w.Seconds, w.GPUs = 30, 2
			ts = append(ts, start.Add(time.Duration(h)*time.Hour+time.Duration(i)*30*time.Second))
			ws = append(ws, w)
		}
	}
	return tags, ts, ws
}

// TestSketchedCells: a range read from hourly cells with their sketches,
// or from raw windows at its ends and cells between, is the raw windows'
// curve with every quantile within SketchAccuracy, the means to the
// cells' seven digits and the frontier exact; without sketches the
// quantiles are off by more.
func TestSketchedCells(t *testing.T) {
	tags, ts, ws := hourlyWindows()
	exact := NewBuilder()
	for _, w := range ws {
		w.Key = KeyOf(tags)
		exact.Add(w)
	}
	want := exact.Curves(Options{Floor: 100})[0]

	read := func(rawHours map[int]bool, sketches bool) Curve {
		b := NewBuilder()
		cs := NewCells(time.Hour)
		for i, w := range ws {
			if rawHours[ts[i].Hour()] {
				w.Key = KeyOf(tags)
				b.Add(w)
				continue
			}
			cs.Add(tags, ts[i], w)
		}
		r := NewRanged()
		if err := cs.Each(func(tags map[string]string, _ time.Time, f map[string]any) error {
			sk := ""
			if sketches {
				sk = f[schema.FieldSketches].(string)
			}
			return r.Add(tags, f[schema.FieldCells].(string), sk)
		}); err != nil {
			t.Fatal(err)
		}
		r.Into(b)
		return b.Curves(Options{Floor: 100})[0]
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) } // seven digits
	worst := 0.0
	for _, tc := range []struct {
		name     string
		raw      map[int]bool
		sketches bool
	}{{"cells", nil, true}, {"raw ends, cells between", map[int]bool{0: true, 5: true}, true}, {"cells without sketches", nil, false}} {
		got := read(tc.raw, tc.sketches)
		if len(got.Bins) != len(want.Bins) {
			t.Fatalf("%s: %d bins, want %d", tc.name, len(got.Bins), len(want.Bins))
		}
		for i := range want.Bins {
			g, w := got.Bins[i], want.Bins[i]
			if g.Windows != w.Windows || !near(g.GPUHours, w.GPUHours) || !near(*g.SystemTPS.Mean, *w.SystemTPS.Mean) || !near(*g.PerUserTPS.Mean, *w.PerUserTPS.Mean) {
				t.Errorf("%s, bin %s: %+v, want %+v", tc.name, w.Running, g, w)
			}
			for _, q := range [][2]float64{{g.SystemTPS.P10, w.SystemTPS.P10}, {g.SystemTPS.P50, w.SystemTPS.P50}, {g.SystemTPS.P90, w.SystemTPS.P90},
				{g.PerUserTPS.P10, w.PerUserTPS.P10}, {g.PerUserTPS.P50, w.PerUserTPS.P50}, {g.PerUserTPS.P90, w.PerUserTPS.P90}} {
				if !tc.sketches {
					worst = max(worst, math.Abs(q[0]-q[1])/q[1])
				} else if !within(q[0], q[1], SketchAccuracy) {
					t.Errorf("%s, bin %s: quantile %v, the windows' %v", tc.name, w.Running, q[0], q[1])
				}
			}
		}
		if !tc.sketches {
			if got.Exactness != RollupExactness || worst <= 2*SketchAccuracy {
				t.Errorf("%s: %q, quantiles at most %.3f off: the test's hours do not drift", tc.name, got.Exactness, worst)
			}
			continue
		}
		if got.Exactness != SketchExactness || !within(*got.MedianSystemTPS, *want.MedianSystemTPS, SketchAccuracy) {
			t.Errorf("%s: %q, median system TPS %v, want %v", tc.name, got.Exactness, *got.MedianSystemTPS, *want.MedianSystemTPS)
		}
		if len(got.Frontier) != len(want.Frontier) {
			t.Fatalf("%s: frontier %v, want %v", tc.name, got.Frontier, want.Frontier)
		}
		for i := range want.Frontier {
			if got.Frontier[i] != want.Frontier[i] {
				t.Errorf("%s: frontier[%d] %v, want %v", tc.name, i, got.Frontier[i], want.Frontier[i])
			}
		}
		if got.Operating == nil || want.Operating == nil || got.Operating.Running != want.Operating.Running {
			t.Errorf("%s: operating point %+v, want %+v", tc.name, got.Operating, want.Operating)
		}
	}
}

// TestSketchesRefused: a sketches field that does not read leaves its
// whole point out, counted, as a bad cells field does.
func TestSketchesRefused(t *testing.T) {
	tags := map[string]string{schema.TagHost: "h"}
	cells := "decode,4,2,0,8,2,200,200,200,2,100,100,100,,,,20,2000,80,4000"
	for _, bad := range []string{
		"decode,4,3:2",            // three parts
		"decode,4,3:x,3:2",        // a count that is no number
		"decode,5,3:2,3:2",        // no such cell
		"mixed,4,3:2,3:2",         // no such kind
		"decode,F,100:200",        // a frontier point of two numbers
		"decode,F,100:200:-1",     // a negative
		"decode,4,3:2,3:2;x,y,z,", // a bad record after a good one
	} {
		r := NewRanged()
		if err := r.Add(tags, cells, bad); err == nil || r.Bad != 1 {
			t.Errorf("sketches %q taken (%v)", bad, err)
		}
		b := NewBuilder()
		r.Into(b)
		if b.Skipped[SkipBadCell] != 1 || len(b.Curves(Options{})) != 0 {
			t.Errorf("sketches %q: skipped %v", bad, b.Skipped)
		}
	}
	// Cells some of whose bins have no sketch are read as cells without.
	r := NewRanged()
	if err := r.Add(tags, cells+";"+strings.Replace(cells, "decode,4,", "decode,5,", 1), "decode,4,2:2,1:2"); err != nil {
		t.Fatal(err)
	}
	b := NewBuilder()
	r.Into(b)
	if c := b.Curves(Options{}); len(c) != 1 || c[0].Exactness != RollupExactness || c[0].Bins[0].SystemTPS.P50 != 100 {
		t.Errorf("partly sketched cells: %+v", c)
	}
}
