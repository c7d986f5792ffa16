package window

import (
	"sort"
	"time"

	"github.com/tpsmon/tpsmon/collector"
)

// ivSums is what a server's intervals say of one window. Each interval's
// amounts are spread over it by time overlap: the part of (Start, End]
// that falls in the window counts, in proportion.
type ivSums struct {
	tokens, prompt   float64
	hasTok, hasPrmpt bool
	userTok, userSec float64
	preempt          float64
	hasPreempt       bool
	// Overlap-weighted gauges: sum of value*seconds, and the seconds.
	run, runW, wait, waitW, kv, kvW float64
	// reqSec is the seconds of requests' own spans in the window: divided
	// by the covered time, the mean concurrency.
	reqSec float64
	n      int
}

// overlap returns the part of (a, b] inside [s, e), in seconds, and the
// fraction of (a, b] that is; a zero-length interval counts whole in the
// window that holds b.
func overlap(a, b, s, e time.Time) (float64, float64) {
	if !b.After(a) {
		if !b.Before(s) && b.Before(e) {
			return 0, 1
		}
		return 0, 0
	}
	lo, hi := a, b
	if lo.Before(s) {
		lo = s
	}
	if hi.After(e) {
		hi = e
	}
	if !hi.After(lo) {
		return 0, 0
	}
	d := hi.Sub(lo)
	return d.Seconds(), float64(d) / float64(b.Sub(a))
}

// sumIntervals spreads the intervals with the given Observed flag over
// [s, e).
func sumIntervals(ivs []collector.Interval, observed bool, s, e time.Time) ivSums {
	var r ivSums
	for _, iv := range ivs {
		if iv.Observed != observed {
			continue
		}
		sec, f := overlap(iv.Start, iv.End, s, e)
		if f == 0 {
			continue
		}
		r.n++
		if iv.Tokens >= 0 {
			r.tokens += iv.Tokens * f
			r.hasTok = true
		}
		if iv.PromptTokens >= 0 {
			r.prompt += iv.PromptTokens * f
			r.hasPrmpt = true
		}
		if iv.UserTokens > 0 && iv.UserSeconds > 0 {
			r.userTok += iv.UserTokens * f
			r.userSec += iv.UserSeconds * f
		}
		if iv.Preemptions >= 0 {
			r.preempt += iv.Preemptions * f
			r.hasPreempt = true
		}
		w := sec
		if w == 0 {
			w = 1e-9 // a point still counts for its gauges
		}
		if iv.Running >= 0 {
			r.run += iv.Running * w
			r.runW += w
		}
		if iv.Waiting >= 0 {
			r.wait += iv.Waiting * w
			r.waitW += w
		}
		if iv.KV >= 0 {
			r.kv += iv.KV * w
			r.kvW += w
		}
		if iv.Request {
			r.reqSec += sec
		}
	}
	return r
}

// observedCover returns how much of [s, e) the observed intervals cover.
func observedCover(ivs []collector.Interval, s, e time.Time) time.Duration {
	type seg struct{ a, b time.Time }
	var segs []seg
	for _, iv := range ivs {
		if !iv.Observed || !iv.End.After(iv.Start) {
			continue
		}
		a, b := iv.Start, iv.End
		if a.Before(s) {
			a = s
		}
		if b.After(e) {
			b = e
		}
		if b.After(a) {
			segs = append(segs, seg{a, b})
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].a.Before(segs[j].a) })
	var total time.Duration
	var cur seg
	for i, sg := range segs {
		if i == 0 || sg.a.After(cur.b) {
			total += cur.b.Sub(cur.a)
			cur = sg
			continue
		}
		if sg.b.After(cur.b) {
			cur.b = sg.b
		}
	}
	return total + cur.b.Sub(cur.a)
}

// pruneIntervals keeps the intervals that reach past e.
func pruneIntervals(ivs []collector.Interval, e time.Time) []collector.Interval {
	out := ivs[:0]
	for _, iv := range ivs {
		if iv.End.After(e) {
			out = append(out, iv)
		}
	}
	return out
}
