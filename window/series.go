package window

import (
	"math"
	"sort"
	"time"
)

// counter is one cumulative series, kept as a running total m that grows
// through resets: after a drop the increment is the new raw value, so a
// restarted source never yields a negative delta.
//
// Between two points closer than maxGap the total is interpolated
// linearly, so tokens split across a window edge in proportion to time.
// Across a longer gap nothing is known of when the increment happened: it
// is held flat and lands at the later point. After the last point it is
// held flat as well, until a newer point arrives.
type counter struct {
	pts []cpoint
	// edge is the total at the end of the last closed window; the next
	// window starts from it, so windows telescope and no token is counted
	// twice or lost between them.
	edge    float64
	hasEdge bool
	// rebase says the next reading starts the series anew: nothing is
	// known of the growth since the last point kept (rewind).
	rebase bool
}

type cpoint struct {
	t      time.Time
	raw, m float64
}

// add appends a reading; readings not newer than the last are ignored
// (a source reads a series in order).
func (c *counter) add(t time.Time, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	n := len(c.pts)
	if n == 0 {
		c.pts = append(c.pts, cpoint{t: t, raw: v, m: v})
		return
	}
	last := c.pts[n-1]
	if !t.After(last.t) {
		return
	}
	d := v - last.raw
	switch {
	case c.rebase:
		d, c.rebase = 0, false
	case d < 0:
		d = v // the source restarted: it counted v since then
	}
	c.pts = append(c.pts, cpoint{t: t, raw: v, m: last.m + d})
}

// rewind forgets the points after cut; the next reading carries on from
// the last point kept without counting the growth in between. cut must
// not be before the last closed window's end, whose point is kept.
func (c *counter) rewind(cut time.Time) {
	n := len(c.pts)
	for n > 0 && c.pts[n-1].t.After(cut) {
		n--
	}
	c.pts = c.pts[:n]
	c.rebase = n > 0
}

// at returns the running total at time e, and false before the first point.
func (c *counter) at(e time.Time, maxGap time.Duration) (float64, bool) {
	n := len(c.pts)
	if n == 0 || e.Before(c.pts[0].t) {
		return 0, false
	}
	// Windows close in order, so the bracket is near the start of pts.
	for i := 1; i < n; i++ {
		b := c.pts[i]
		if b.t.Before(e) {
			continue
		}
		a := c.pts[i-1]
		gap := b.t.Sub(a.t)
		if gap > maxGap {
			// Held flat: the increment lands in the window that holds b,
			// even when b sits exactly on this edge.
			return a.m, true
		}
		if b.t.Equal(e) {
			return b.m, true
		}
		f := float64(e.Sub(a.t)) / float64(gap)
		return a.m + (b.m-a.m)*f, true
	}
	return c.pts[n-1].m, true
}

// observed returns the increase seen over the parts of [s, e) that lie
// between two points at most maxGap apart, and how long those parts are.
// It is the window's rate on one time base: an increase held across a
// longer gap, or carried in from before s because the previous window
// closed ahead of the point after its edge, is counted by close but has no
// observed time of its own here, so it never inflates a rate.
func (c *counter) observed(s, e time.Time, maxGap time.Duration) (float64, time.Duration) {
	var inc float64
	var secs time.Duration
	for i := 1; i < len(c.pts); i++ {
		a, b := c.pts[i-1], c.pts[i]
		if b.t.Sub(a.t) > maxGap || !b.t.After(s) || !a.t.Before(e) {
			continue
		}
		lo, hi := a.t, b.t
		if lo.Before(s) {
			lo = s
		}
		if hi.After(e) {
			hi = e
		}
		if !hi.After(lo) {
			continue
		}
		d := hi.Sub(lo)
		inc += (b.m - a.m) * float64(d) / float64(b.t.Sub(a.t))
		secs += d
	}
	return inc, secs
}

// close returns the running totals at the start and end of the window
// ending at e, starting from the previous edge or, for a new series, from
// its first point; it commits e as the new edge. ok is false while the
// series has not started.
func (c *counter) close(e time.Time, maxGap time.Duration) (span, bool) {
	end, ok := c.at(e, maxGap)
	if !ok {
		return span{}, false
	}
	start := c.edge
	if !c.hasEdge {
		start = c.pts[0].m
	}
	c.edge, c.hasEdge = end, true
	c.prune(e)
	return span{start, end}, true
}

// span is a counter's running total at both edges of a window.
type span struct{ start, end float64 }

func (s span) delta() float64 { return s.end - s.start }

// count is the integer increment, taken as the difference of the rounded
// totals so that the counts of consecutive windows add up exactly.
func (s span) count() int64 { return int64(math.Round(s.end)) - int64(math.Round(s.start)) }

// prune drops points that no later edge can need: all before e but the
// last one, which brackets the next edge.
func (c *counter) prune(e time.Time) {
	i := 0
	for i+1 < len(c.pts) && !c.pts[i+1].t.After(e) {
		i++
	}
	if i > 0 {
		c.pts = append(c.pts[:0], c.pts[i:]...)
	}
}

// gauge is a series of instantaneous readings.
type gauge struct {
	pts []gpoint
}

type gpoint struct {
	t time.Time
	v float64
}

func (g *gauge) add(t time.Time, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	g.pts = append(g.pts, gpoint{t, v})
}

// stats summarises the readings in [s, e).
type stats struct {
	n        int
	sum, max float64
}

func (st stats) mean() float64 { return st.sum / float64(st.n) }

func (g *gauge) stats(s, e time.Time) stats {
	var st stats
	for _, p := range g.pts {
		if p.t.Before(s) || !p.t.Before(e) {
			continue
		}
		if st.n == 0 || p.v > st.max {
			st.max = p.v
		}
		st.n++
		st.sum += p.v
	}
	return st
}

func (g *gauge) prune(e time.Time) {
	i := 0
	for i < len(g.pts) && g.pts[i].t.Before(e) {
		i++
	}
	if i > 0 {
		g.pts = append(g.pts[:0], g.pts[i:]...)
	}
}

// timeline records when a source delivered data, for coverage.
type timeline struct {
	ts []time.Time
}

func (tl *timeline) add(t time.Time) {
	if n := len(tl.ts); n > 0 && !t.After(tl.ts[n-1]) {
		return
	}
	tl.ts = append(tl.ts, t)
}

// covered returns how much of [s, e) lies between two consecutive
// deliveries at most maxGap apart. The deliveries are in time order: only
// those around [s, e) are looked at, so a replay that adds a recording's
// every delivery before closing its windows costs no pass over all of
// them per window.
func (tl *timeline) covered(s, e time.Time, maxGap time.Duration) time.Duration {
	var total time.Duration
	for i := max(1, tl.after(s)); i < len(tl.ts) && tl.ts[i-1].Before(e); i++ {
		a, b := tl.ts[i-1], tl.ts[i]
		if b.After(a.Add(maxGap)) { // b.Sub(a) > maxGap, without Sub's overflow check
			continue
		}
		lo, hi := a, b
		if lo.Before(s) {
			lo = s
		}
		if hi.After(e) {
			hi = e
		}
		total += hi.Sub(lo)
	}
	return total
}

// segments merges into segs (disjoint, in order) the parts of [s, e)
// that covered counts, and returns them; for a window with holes only,
// which must know where it was covered, not just for how long.
func (tl *timeline) segments(segs []seg, s, e time.Time, maxGap time.Duration) []seg {
	out := append([]seg(nil), segs...)
	for i := max(1, tl.after(s)); i < len(tl.ts) && tl.ts[i-1].Before(e); i++ {
		a, b := tl.ts[i-1], tl.ts[i]
		if b.After(a.Add(maxGap)) {
			continue
		}
		if a.Before(s) {
			a = s
		}
		if b.After(e) {
			b = e
		}
		out = addCover(out, a, b)
	}
	return out
}

// rewind forgets the deliveries after cut.
func (tl *timeline) rewind(cut time.Time) { tl.ts = tl.ts[:tl.after(cut)] }

// after returns the index of the first delivery after t.
func (tl *timeline) after(t time.Time) int {
	return sort.Search(len(tl.ts), func(i int) bool { return tl.ts[i].After(t) })
}

// count returns the number of deliveries in [s, e).
func (tl *timeline) count(s, e time.Time) int {
	from := sort.Search(len(tl.ts), func(i int) bool { return !tl.ts[i].Before(s) })
	to := sort.Search(len(tl.ts), func(i int) bool { return !tl.ts[i].Before(e) })
	return max(0, to-from)
}

// prune forgets the deliveries before the last one at or before e. What
// is left moves to the front when it is little (a few windows' worth, or
// no more than what was dropped), so that a timeline pruned as it goes
// (the daemon, a log's replay) reuses its array. Otherwise the slice is
// cut at its front, not copied, so that a recording added whole before
// its windows close is not copied over and over (the next appends that
// outgrow it move what is left).
func (tl *timeline) prune(e time.Time) {
	i := tl.after(e) - 1
	switch {
	case i <= 0:
	case len(tl.ts)-i <= max(i, 64):
		tl.ts = tl.ts[:copy(tl.ts, tl.ts[i:])]
	default:
		tl.ts = tl.ts[i:]
	}
}
