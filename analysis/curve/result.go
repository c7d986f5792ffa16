package curve

import (
	"fmt"
	"math"
	"sort"
)

// Stat is a rate over one bin's windows.
type Stat struct {
	P10 float64 `json:"p10"`
	P50 float64 `json:"median"`
	P90 float64 `json:"p90"`
	// Mean is exact, from raw windows and rollups alike (MeansDefinition);
	// absent where a window's length is not known or a rollup cell
	// predates the means.
	Mean *float64 `json:"mean,omitempty"`
}

// Bin is one concurrency bin of a curve.
type Bin struct {
	// Running is the bin's label ("4", "9-12", "513+"): rounded mean
	// running requests.
	Running     string  `json:"running"`
	RunningMean float64 `json:"running_mean"`
	Windows     int     `json:"windows"`
	GPUHours    float64 `json:"gpu_hours"`
	SystemTPS   *Stat   `json:"system_tps,omitempty"`
	PerUserTPS  *Stat   `json:"per_user_tps,omitempty"`
	// Thin bins (fewer than MinWindows windows) are shown but not used for
	// the operating point.
	Thin bool `json:"thin,omitempty"`
}

// Curve is one server's curve for one model, engine, GPU set and kind.
type Curve struct {
	Key
	Kind    Kind  `json:"kind"`
	Windows int   `json:"windows"`
	Bins    []Bin `json:"bins"`
	// Frontier is the best system TPS reached at each per-user TPS: the
	// points no other point beats on both, by falling per-user TPS.
	Frontier []Pair `json:"frontier"`
	// MedianSystemTPS is the median system TPS of all the curve's windows
	// over the range: "today's", the headroom's denominator.
	MedianSystemTPS *float64 `json:"median_system_tps,omitempty"`
	// Exactness says how the quantiles were read: "exact" from the
	// windows, or RollupExactness. Means says what the means are.
	Exactness string          `json:"exactness"`
	Means     string          `json:"means"`
	Operating *OperatingPoint `json:"operating_point,omitempty"`
}

// RollupExactness is what quantiles read from rollups are: each the
// windows-weighted mean over the range's periods of the period's own
// quantile (exact over its windows); exact when a bin's windows lie in
// one period. The range's median system TPS is then read from the bins'
// quantiles.
const RollupExactness = "rollup: windows-weighted means over the periods of each period's quantiles"

// MeansDefinition is what a bin's means are: exact at every level, since
// rollup cells carry their sums. A benchmark's per-level table computes
// the same: tokens over the level's seconds, and each stream-second's
// speed counted once (a mean over equal slices of each stream).
const MeansDefinition = "system_tps: tokens per observed second (Σ system_tps × window_s × coverage / Σ window_s × coverage); " +
	"per_user_tps: per stream-second (each window weighted by running × window_s × coverage)"

// OperatingPoint is the highest concurrency bin whose median per-user TPS
// still meets the floor, and what it would buy.
type OperatingPoint struct {
	Floor     float64 `json:"per_user_floor"`
	Statistic string  `json:"statistic"` // "median": of the bin's per-user TPS
	// Met is false when no bin meets the floor: the other fields but
	// Note are then absent.
	Met        bool     `json:"met"`
	Running    string   `json:"running,omitempty"`
	RunningAt  *float64 `json:"running_mean,omitempty"`
	SystemTPS  *float64 `json:"system_tps,omitempty"`
	PerUserTPS *float64 `json:"per_user_tps,omitempty"`
	// Headroom is SystemTPS over MedianSystemTPS.
	Headroom *float64 `json:"headroom,omitempty"`
	// KneeObserved: a bin above the point (with enough windows) falls
	// below the floor. Otherwise the history stops at NotObservedAbove and
	// more concurrency may still meet it: not extrapolated.
	KneeObserved     bool   `json:"knee_observed"`
	NotObservedAbove string `json:"not_observed_above,omitempty"`
	Note             string `json:"note"`
}

// Options are what the curves are judged by.
type Options struct {
	// Floor is the per-user TPS objective (tokens/s); <= 0: no operating
	// point.
	Floor float64
	// MinWindows is the fewest windows a bin needs to count for the
	// operating point (default DefaultMinWindows).
	MinWindows int
}

// DefaultMinWindows is Options.MinWindows when it is not set.
const DefaultMinWindows = 3

// Curves are the gathered curves, in key order.
func (b *Builder) Curves(o Options) []Curve {
	if o.MinWindows <= 0 {
		o.MinWindows = DefaultMinWindows
	}
	var out []Curve
	for _, c := range b.curves {
		out = append(out, c.result(o))
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		for _, p := range [][2]string{{x.Host, y.Host}, {x.Server, y.Server}, {x.Engine, y.Engine}, {x.Version, y.Version}, {x.Model, y.Model}, {x.GPUs, y.GPUs}, {string(x.Kind), string(y.Kind)}} {
			if p[0] != p[1] {
				return p[0] < p[1]
			}
		}
		return false
	})
	return out
}

func stat(d dist, mean *float64) *Stat {
	if d.count() == 0 {
		return nil
	}
	p := d.quantiles(0.1, 0.5, 0.9)
	return &Stat{P10: p[0], P50: p[1], P90: p[2], Mean: mean}
}

// withMean is a copy of s with its mean (nil s: nil).
func withMean(s *Stat, mean *float64) *Stat {
	if s == nil {
		return nil
	}
	x := *s
	x.Mean = mean
	return &x
}

// blend is the windows-weighted mean of two sets' quantiles, x over nx
// windows and y over ny (either nil: the other), with the bin's mean.
func blend(x *Stat, nx float64, y *Stat, ny float64, mean *float64) *Stat {
	switch {
	case x == nil:
		return withMean(y, mean)
	case y == nil:
		return withMean(x, mean)
	}
	a, b := nx/(nx+ny), ny/(nx+ny)
	return &Stat{P10: a*x.P10 + b*y.P10, P50: a*x.P50 + b*y.P50, P90: a*x.P90 + b*y.P90, Mean: mean}
}

func (c *curveAcc) result(o Options) Curve {
	out := Curve{Key: c.key, Kind: c.kind, Exactness: "exact", Means: MeansDefinition}
	var all dist
	var sketched, bucketed bool
	for i, a := range c.bins {
		if a.windows == 0 {
			continue
		}
		bin := Bin{Running: bins[i].label(), RunningMean: a.runningSum / a.windows, Windows: int(math.Round(a.windows)),
			GPUHours: a.gpuSecs / 3600, SystemTPS: stat(a.sys, a.means.sys()), PerUserTPS: stat(a.user, a.means.user()),
			Thin: a.windows < float64(o.MinWindows)}
		if a.cellN > 0 {
			bucketed = true
			bin.SystemTPS = blend(bin.SystemTPS, a.sys.count(), a.cellSys, a.cellN, a.means.sys())
			bin.PerUserTPS = blend(bin.PerUserTPS, a.user.count(), a.cellUser, a.cellN, a.means.user())
		}
		sketched = sketched || a.sketched
		out.Windows += bin.Windows
		out.Bins = append(out.Bins, bin)
		all = append(all, a.sys...)
		all = append(all, a.pseudo...)
	}
	switch {
	case bucketed:
		out.Exactness = RollupExactness
	case sketched:
		out.Exactness = SketchExactness
	}
	if all.count() > 0 {
		m := all.quantile(0.5)
		out.MedianSystemTPS = &m
	}
	out.Frontier = frontier(c.pairs)
	if o.Floor > 0 {
		out.Operating = operating(out, o.Floor, o.MinWindows)
	}
	return out
}

// frontier keeps the points no other beats on both rates: by falling
// per-user TPS, each with more system TPS than every point before it.
func frontier(ps []Pair) []Pair {
	s := append([]Pair{}, ps...)
	sort.Slice(s, func(i, j int) bool {
		if s[i].PerUserTPS != s[j].PerUserTPS {
			return s[i].PerUserTPS > s[j].PerUserTPS
		}
		return s[i].SystemTPS > s[j].SystemTPS
	})
	var out []Pair
	best := math.Inf(-1)
	for _, p := range s {
		if p.SystemTPS > best {
			out = append(out, p)
			best = p.SystemTPS
		}
	}
	return out
}

func operating(c Curve, floor float64, minWindows int) *OperatingPoint {
	op := &OperatingPoint{Floor: floor, Statistic: "median"}
	at := -1
	var top string
	for i, b := range c.Bins {
		if b.Thin || b.PerUserTPS == nil || b.SystemTPS == nil {
			continue
		}
		top = b.Running
		if b.PerUserTPS.P50 >= floor {
			at = i
		}
	}
	if top == "" {
		op.Note = fmt.Sprintf("no concurrency seen in %d windows or more with both rates", minWindows)
		return op
	}
	if at < 0 {
		op.KneeObserved = true
		op.Note = fmt.Sprintf("per-user floor %s tok/s not met at any concurrency seen in %d windows or more", num(floor), minWindows)
		return op
	}
	b := c.Bins[at]
	op.Met = true
	op.Running = b.Running
	op.RunningAt = &b.RunningMean
	sys, user := b.SystemTPS.P50, b.PerUserTPS.P50
	op.SystemTPS, op.PerUserTPS = &sys, &user
	for _, above := range c.Bins[at+1:] {
		if !above.Thin && above.PerUserTPS != nil && above.SystemTPS != nil {
			op.KneeObserved = true // it is below the floor, or at would be higher
		}
	}
	if !op.KneeObserved {
		op.NotObservedAbove = top
	}
	if c.MedianSystemTPS != nil && *c.MedianSystemTPS > 0 {
		h := sys / *c.MedianSystemTPS
		op.Headroom = &h
	}
	op.Note = Line(op)
	return op
}

// Line is the operating point in a sentence: "headroom 2.3x at 24
// running, per-user floor 20 tok/s" or "... knee not observed above 8".
func Line(op *OperatingPoint) string {
	if op == nil {
		return "no per-user floor"
	}
	if !op.Met {
		return op.Note
	}
	s := fmt.Sprintf("at %s running: %s tok/s system, %s tok/s per user", op.Running, num(*op.SystemTPS), num(*op.PerUserTPS))
	if op.Headroom != nil {
		s = fmt.Sprintf("headroom %.1f× at %s running (%s tok/s system)", *op.Headroom, op.Running, num(*op.SystemTPS))
	}
	s += fmt.Sprintf(", per-user floor %s tok/s", num(op.Floor))
	if !op.KneeObserved {
		s += "; knee not observed above concurrency " + op.NotObservedAbove
	}
	return s
}

// ShortLine is the operating point in the words of a status line:
// "headroom 2.3× at 24 running, per-user floor 20 tok/s", with "; knee not
// observed above N" where no bin above was seen.
func ShortLine(op *OperatingPoint) string {
	if op == nil || !op.Met || op.Headroom == nil {
		return Line(op)
	}
	s := fmt.Sprintf("headroom %.1f× at %s running, per-user floor %s tok/s", *op.Headroom, op.Running, num(op.Floor))
	if !op.KneeObserved {
		s += "; knee not observed above " + op.NotObservedAbove
	}
	return s
}

func num(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
