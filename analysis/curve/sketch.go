package curve

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// SketchAccuracy is the relative accuracy of a quantile read from
// sketches: each value stands as the middle of a logarithmic bucket
// (DDSketch's mapping), at most this far from it, so a quantile
// interpolated between two such values is too.
const SketchAccuracy = 0.005

// SketchExactness is what quantiles read from sketches are.
const SketchExactness = "sketch: each quantile within 0.5 % of the windows' exact one (logarithmic buckets of the rollups' periods, added up)"

var (
	sketchGamma = (1 + SketchAccuracy) / (1 - SketchAccuracy)
	sketchLog   = math.Log(sketchGamma)
)

// sketchMin is the smallest value given a bucket of its own; below it,
// values count as 0 (rates of a window: 1e-9 tokens per second is none).
const sketchMin = 1e-9

// sketch counts one rate's windows of a bin in buckets: counts[i] of
// bucket lo+i, which holds (γ^(k-1), γ^k]; zeros apart. Counts add up
// exactly across periods, which quantiles do not.
type sketch struct {
	zeros  float64
	lo     int
	counts []float64
}

func sketchIndex(v float64) int { return int(math.Ceil(math.Log(v) / sketchLog)) }

// sketchValue is the value bucket k stands for: within SketchAccuracy of
// every value in it.
func sketchValue(k int) float64 { return 2 * math.Pow(sketchGamma, float64(k)) / (sketchGamma + 1) }

// add counts v (>= 0) w times.
func (s *sketch) add(v, w float64) {
	if v < sketchMin {
		s.zeros += w
		return
	}
	k := sketchIndex(v)
	switch {
	case len(s.counts) == 0:
		s.lo, s.counts = k, []float64{0}
	case k < s.lo:
		s.counts = append(make([]float64, s.lo-k), s.counts...)
		s.lo = k
	case k >= s.lo+len(s.counts):
		s.counts = append(s.counts, make([]float64, k-s.lo-len(s.counts)+1)...)
	}
	s.counts[k-s.lo] += w
}

// merge adds o's counts, bucket by bucket (both use one mapping).
func (s *sketch) merge(o *sketch) {
	s.zeros += o.zeros
	if len(o.counts) == 0 {
		return
	}
	if len(s.counts) == 0 {
		s.lo, s.counts = o.lo, append([]float64(nil), o.counts...)
		return
	}
	lo, hi := min(s.lo, o.lo), max(s.lo+len(s.counts), o.lo+len(o.counts))
	if lo < s.lo || hi > s.lo+len(s.counts) {
		c := make([]float64, hi-lo)
		copy(c[s.lo-lo:], s.counts)
		s.lo, s.counts = lo, c
	}
	for i, n := range o.counts {
		s.counts[o.lo+i-s.lo] += n
	}
}

// dist is the sketch as values standing for their windows.
func (s *sketch) dist() dist {
	var d dist
	if s.zeros > 0 {
		d = append(d, wv{0, s.zeros})
	}
	for i, c := range s.counts {
		if c > 0 {
			d = append(d, wv{sketchValue(s.lo + i), c})
		}
	}
	return d
}

// sketchOf counts a period's values.
func sketchOf(d dist) sketch {
	var s sketch
	for _, x := range d {
		s.add(x.v, x.w)
	}
	return s
}

// String writes the sketch compactly: "[Nz]LO:c/c/…", the zeros' count,
// the first bucket's index and each bucket's count from it, an empty
// count for none; "" for no value.
func (s *sketch) String() string {
	var b strings.Builder
	if s.zeros > 0 {
		b.WriteString(strconv.FormatFloat(s.zeros, 'g', -1, 64) + "z")
	}
	if len(s.counts) > 0 {
		b.WriteString(strconv.Itoa(s.lo) + ":")
		for i, c := range s.counts {
			if i > 0 {
				b.WriteByte('/')
			}
			if c != 0 {
				b.WriteString(strconv.FormatFloat(c, 'g', -1, 64))
			}
		}
	}
	return b.String()
}

// maxSketchBuckets bounds a sketch's span read back: the buckets from
// 1e-9 to the largest believable rate number about 5,000.
const maxSketchBuckets = 8192

// parseSketch reads String's form back.
func parseSketch(t string) (sketch, error) {
	var s sketch
	if z, rest, ok := strings.Cut(t, "z"); ok {
		v, err := strconv.ParseFloat(z, 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return s, fmt.Errorf("sketch %q: zeros %q", t, z)
		}
		s.zeros, t = v, rest
	}
	if t == "" {
		return s, nil
	}
	lo, counts, ok := strings.Cut(t, ":")
	if !ok {
		return s, fmt.Errorf("sketch %q: no first bucket", t)
	}
	k, err := strconv.Atoi(lo)
	if err != nil || k < sketchIndex(sketchMin)-1 || k > sketchIndex(maxRate)+1 {
		return s, fmt.Errorf("sketch %q: first bucket %q", t, lo)
	}
	n := strings.Count(counts, "/") + 1
	if n > maxSketchBuckets || k+n > sketchIndex(maxRate)+2 {
		return s, fmt.Errorf("sketch %q: %d buckets", t, n)
	}
	s.lo, s.counts = k, make([]float64, n)
	for i := range n {
		p, rest, _ := strings.Cut(counts, "/")
		counts = rest
		if p == "" {
			continue
		}
		v, err := count(p)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return s, fmt.Errorf("sketch %q: count %q", t, p)
		}
		s.counts[i] = v
	}
	if s.counts[0] == 0 || s.counts[len(s.counts)-1] == 0 {
		return s, fmt.Errorf("sketch %q: an empty first or last bucket", t)
	}
	return s, nil
}

// count reads a count: a whole number of windows as tpsmon writes it
// (ParseUint, many times faster than ParseFloat), else any number.
func count(p string) (float64, error) {
	if u, err := strconv.ParseUint(p, 10, 53); err == nil {
		return float64(u), nil
	}
	return strconv.ParseFloat(p, 64)
}
