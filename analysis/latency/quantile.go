package latency

import (
	"fmt"
	"math"
	"slices"
)

// Quantile is the q-quantile of some observations and how well it is
// known.
//
// From a histogram the quantile lies in the bucket (Lo, Hi] that holds its
// rank q·n; Value interpolates linearly inside that bucket (observations
// spread evenly over it, as Prometheus' histogram_quantile does; the first
// bucket starts at 0, latencies being durations), so it is an estimate and
// Lo and Hi say how far it can be off. It is Exact when the rank falls on
// an edge: a share q of the observations is then at most that edge and
// the rest above it, and Lo = Hi = Value (a definition that interpolates
// between observations, as FromValues does, may lie above it, short of
// the next observation). A quantile in the +Inf bucket
// has no value (OK false): only that it is above Lo, the last finite edge
// (Hi is +Inf).
//
// From per-request values it is Exact: linear interpolation between the
// closest ranks (Hyndman-Fan type 7, numpy's default), Lo = Hi = Value.
type Quantile struct {
	Q     float64
	Value float64
	OK    bool // Value is known
	// Lo and Hi bound the quantile: it is in (Lo, Hi]. Bounded says they
	// are set (also when OK is false, for a quantile above the last edge).
	Lo, Hi  float64
	Bounded bool
	Exact   bool
	N       float64 // the observations it is over
	Reason  string  // why there is no value
}

// MinObservations returns how many observations a q-quantile needs to
// say more than the extreme one: 1/min(q, 1-q), so 2 for the median, 10
// for p90 and p10, 100 for p99. Below that the quantile is absent.
func MinObservations(q float64) float64 {
	return math.Ceil(1/math.Min(q, 1-q) - 1e-9)
}

func checkQ(q float64) error {
	if !(q > 0 && q < 1) {
		return fmt.Errorf("quantile %g: not between 0 and 1", q)
	}
	return nil
}

// enough returns the reason n observations do not make a q-quantile, or "".
func enough(q, n float64) string {
	need := MinObservations(q)
	switch {
	case n <= 0:
		return "no observations"
	case n < need-slop:
		return fmt.Sprintf("%.4g observations, p%s needs %g", n, pct(q), need)
	}
	return ""
}

// pct names q as a percentile ("90", "99.9").
func pct(q float64) string { return fmt.Sprintf("%g", math.Round(q*1e6)/1e4) }

// FromHistogram returns the q-quantile of the observations h holds (a
// window's bucket deltas). An invalid histogram, or too few observations
// (MinObservations), gives no value and says why.
func FromHistogram(h Histogram, q float64) Quantile {
	out := Quantile{Q: q}
	if err := checkQ(q); err != nil {
		out.Reason = err.Error()
		return out
	}
	if err := h.Check(); err != nil {
		out.Reason = err.Error()
		return out
	}
	out.N = h.Count()
	if r := enough(q, out.N); r != "" {
		out.Reason = r
		return out
	}
	if len(h.Buckets) == 1 {
		out.Reason = "no finite bucket edges"
		return out
	}
	rank := q * out.N
	eps := slop * math.Max(1, out.N)
	lo, below := 0.0, 0.0
	for i, b := range h.Buckets {
		if b.Count < rank-eps {
			lo, below = b.Le, b.Count
			continue
		}
		if i == 0 && b.Le <= 0 {
			// No lower bound for a first edge at or below 0.
			lo = math.Inf(-1)
		}
		out.Lo, out.Hi, out.Bounded = lo, b.Le, true
		switch {
		case math.IsInf(b.Le, 1):
			out.Reason = fmt.Sprintf("above the last finite bucket edge %g", lo)
		case math.Abs(b.Count-rank) <= eps:
			out.Value, out.OK, out.Exact = b.Le, true, true
			out.Lo = b.Le
		case math.IsInf(lo, -1):
			out.Value, out.OK = b.Le, true
		default:
			out.Value, out.OK = lo+(b.Le-lo)*(rank-below)/(b.Count-below), true
		}
		return out
	}
	// Unreachable for a checked histogram: its +Inf bucket holds n.
	out.Reason = "rank beyond the histogram"
	return out
}

// FromValues returns the exact q-quantile of per-request values (type 7).
// NaN values are unknown and left out; too few known values give no value.
func FromValues(values []float64, q float64) Quantile {
	return fromSorted(sortKnown(values, nil), q)
}

// sortKnown appends values' known (not NaN) entries to buf[:0] and sorts
// them: a window's several quantiles of one series share one sort.
func sortKnown(values, buf []float64) []float64 {
	xs := buf[:0]
	for _, v := range values {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	slices.Sort(xs)
	return xs
}

// fromSorted is FromValues over values already known and sorted.
func fromSorted(xs []float64, q float64) Quantile {
	out := Quantile{Q: q}
	if err := checkQ(q); err != nil {
		out.Reason = err.Error()
		return out
	}
	out.N = float64(len(xs))
	if r := enough(q, out.N); r != "" {
		out.Reason = r
		return out
	}
	h := float64(len(xs)-1) * q
	i := int(math.Floor(h))
	v := xs[i]
	if i+1 < len(xs) {
		v += (h - float64(i)) * (xs[i+1] - xs[i])
	}
	out.Value, out.OK, out.Exact = v, true, true
	out.Lo, out.Hi, out.Bounded = v, v, true
	return out
}

// Reciprocal turns the (1-q)-quantile of X into the q-quantile of 1/X
// (X > 0): the p90 time per output token is the p10 tokens per second of
// one user. Bounds swap; above the last edge becomes below its reciprocal.
func Reciprocal(x Quantile) Quantile {
	inv := func(v float64) float64 {
		if v <= 0 {
			return math.Inf(1)
		}
		return 1 / v
	}
	out := Quantile{Q: 1 - x.Q, N: x.N, Exact: x.Exact, Reason: x.Reason, Bounded: x.Bounded}
	if x.OK {
		out.Value, out.OK = inv(x.Value), !math.IsInf(inv(x.Value), 0)
		if !out.OK {
			out.Reason = "time per token of 0"
		}
	}
	if x.Bounded {
		out.Lo, out.Hi = inv(x.Hi), inv(x.Lo)
		if math.IsInf(x.Hi, 1) {
			out.Lo = 0
		}
	}
	return out
}
