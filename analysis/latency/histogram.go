// Package latency holds what one user feels, as pure arithmetic: latency
// quantiles from Prometheus histogram bucket deltas or from per-request
// values, and how many requests met their objectives (SLO attainment,
// goodput). Every number says how exact it is: interpolated inside a
// bucket (with the bucket's bounds), exact, or only bounded; a number
// that cannot be known is absent with a reason, never made up.
package latency

import (
	"errors"
	"fmt"
	"math"
)

// Bucket is one cumulative bucket of a Prometheus histogram: Count
// observations were at most Le.
type Bucket struct {
	Le    float64
	Count float64
}

// Histogram is a Prometheus histogram's buckets, cumulative, in ascending
// order of Le, the last one +Inf (its count is every observation). Over a
// window it holds the bucket counters' growth, which interpolation at the
// window's edges can make fractional.
type Histogram struct {
	Buckets []Bucket
}

// Errors a histogram's counters can give; the quantiles of such a window
// are absent, with the error as the reason.
var (
	// ErrReset: a bucket counter fell, the server restarted between the
	// readings.
	ErrReset = errors.New("histogram counter reset")
	// ErrLayout: the bucket edges differ between the readings (the server
	// was restarted with other buckets, or two histograms do not match).
	ErrLayout = errors.New("histogram buckets changed")
	// ErrInvalid: not a cumulative histogram (no +Inf bucket, edges not
	// ascending, counts falling across edges, NaN).
	ErrInvalid = errors.New("not a cumulative histogram")
)

// slop is how far float arithmetic on counts (interpolated shares summed)
// may stray from monotone before a histogram is refused.
const slop = 1e-9

// Check tells whether h is a cumulative histogram: at least one bucket,
// edges strictly ascending and the last +Inf, counts finite, not negative
// and not falling from one edge to the next.
func (h Histogram) Check() error {
	n := len(h.Buckets)
	if n == 0 {
		return fmt.Errorf("%w: no buckets", ErrInvalid)
	}
	if !math.IsInf(h.Buckets[n-1].Le, 1) {
		return fmt.Errorf("%w: no +Inf bucket (last le %g)", ErrInvalid, h.Buckets[n-1].Le)
	}
	prev := Bucket{Le: math.Inf(-1)}
	for i, b := range h.Buckets {
		switch {
		case math.IsNaN(b.Le):
			return fmt.Errorf("%w: bucket %d has le NaN", ErrInvalid, i)
		case b.Le <= prev.Le:
			return fmt.Errorf("%w: le %g follows le %g", ErrInvalid, b.Le, prev.Le)
		case math.IsNaN(b.Count) || math.IsInf(b.Count, 0):
			return fmt.Errorf("%w: le %g counts %g", ErrInvalid, b.Le, b.Count)
		case b.Count < -slop*math.Max(1, prev.Count):
			return fmt.Errorf("%w: le %g counts %g", ErrInvalid, b.Le, b.Count)
		case i > 0 && b.Count < prev.Count-slop*math.Max(1, prev.Count):
			return fmt.Errorf("%w: le %g counts %g, fewer than le %g's %g", ErrInvalid, b.Le, b.Count, prev.Le, prev.Count)
		}
		prev = b
	}
	return nil
}

// Count returns the observations h holds (its +Inf bucket); 0 when empty.
func (h Histogram) Count() float64 {
	if len(h.Buckets) == 0 {
		return 0
	}
	return h.Buckets[len(h.Buckets)-1].Count
}

// sameLayout tells whether a and b have the same edges.
func sameLayout(a, b Histogram) bool {
	if len(a.Buckets) != len(b.Buckets) {
		return false
	}
	for i := range a.Buckets {
		if a.Buckets[i].Le != b.Buckets[i].Le {
			return false
		}
	}
	return true
}

// Delta returns the observations made between two readings of one
// histogram, cur minus prev. A bucket counter that fell is a reset
// (ErrReset) and edges that differ a changed histogram (ErrLayout): the
// span between the two readings is then unknown, never a guess.
func Delta(prev, cur Histogram) (Histogram, error) {
	if err := prev.Check(); err != nil {
		return Histogram{}, fmt.Errorf("earlier reading: %w", err)
	}
	if err := cur.Check(); err != nil {
		return Histogram{}, fmt.Errorf("later reading: %w", err)
	}
	if !sameLayout(prev, cur) {
		return Histogram{}, fmt.Errorf("%w: %d edges, then %d", ErrLayout, len(prev.Buckets), len(cur.Buckets))
	}
	out := Histogram{Buckets: make([]Bucket, len(cur.Buckets))}
	for i, b := range cur.Buckets {
		d := b.Count - prev.Buckets[i].Count
		if d < 0 {
			return Histogram{}, fmt.Errorf("%w: le %g went from %g to %g", ErrReset, b.Le, prev.Buckets[i].Count, b.Count)
		}
		out.Buckets[i] = Bucket{Le: b.Le, Count: d}
	}
	// Each bucket grew, but the growth need not be cumulative when a
	// reading is torn (a page written while requests finished): checked.
	if err := out.Check(); err != nil {
		return Histogram{}, fmt.Errorf("growth: %w", err)
	}
	return out, nil
}

// Add returns the sum of histograms of one layout (data-parallel ranks,
// the pieces of one window); ErrLayout when the edges differ.
func Add(hs ...Histogram) (Histogram, error) {
	if len(hs) == 0 {
		return Histogram{}, fmt.Errorf("%w: nothing to add", ErrInvalid)
	}
	out := Histogram{Buckets: append([]Bucket(nil), hs[0].Buckets...)}
	for _, h := range hs[1:] {
		if !sameLayout(out, h) {
			return Histogram{}, fmt.Errorf("%w: %d edges and %d", ErrLayout, len(out.Buckets), len(h.Buckets))
		}
		for i, b := range h.Buckets {
			out.Buckets[i].Count += b.Count
		}
	}
	return out, out.Check()
}

// AtMost returns how many observations were at most x: exactly when x is
// one of the edges, else bounded by the counts at the edges around it
// (below the first edge from 0; past the last finite edge up to all).
func (h Histogram) AtMost(x float64) (lo, hi float64, exact bool) {
	below := 0.0
	for _, b := range h.Buckets {
		if b.Le == x {
			return b.Count, b.Count, true
		}
		if b.Le > x {
			return below, b.Count, below == b.Count
		}
		below = b.Count
	}
	return below, below, true
}
