package window

import (
	"time"

	"github.com/tpsmon/tpsmon/sample"
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
	// Speculation tallies of log lines: tokens drafted and accepted.
	specDrafted, specAccepted float64
	// Prompt tokens reused from the cache (llama.cpp log), and whether a
	// line said so.
	cached    float64
	hasCached bool
	// Overlap-weighted gauges: sum of value*seconds, and the seconds.
	run, runW, wait, waitW, kv, kvW float64
	// reqSec is the seconds of requests' own spans in the window, each
	// from when its server held it (Interval.HeldStart): divided by the
	// covered time, the mean concurrency.
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

// add spreads one interval over [s, e).
func (r *ivSums) add(iv sample.Interval, s, e time.Time) {
	if iv.Failed {
		return // a request's outcome, kept by addRequest
	}
	sec, f := overlap(iv.Start, iv.End, s, e)
	promptF := f
	if iv.Request {
		// From when its server took it, which may be before its tokens.
		hs := iv.HeldStart()
		held, _ := overlap(hs, iv.End, s, e)
		r.reqSec += held
		if hs.Before(iv.Start) && iv.PromptTokens >= 0 {
			// Its prompt was evaluated in its slot before its first
			// token: its prompt tokens spread over that, not over its
			// decode (a 198 s prefill's windows read no prompt at all).
			_, promptF = overlap(hs, iv.Start, s, e)
			if f == 0 && promptF > 0 {
				r.prompt += iv.PromptTokens * promptF
				r.hasPrmpt = true
			}
		}
	}
	if f == 0 {
		return
	}
	if iv.PromptCached >= 0 && iv.Tokens < 0 && iv.PromptTokens < 0 {
		// Like a tally, a cache reuse carries nothing else.
		r.cached += iv.PromptCached * f
		r.hasCached = true
		return
	}
	if iv.SpecDrafted > 0 {
		// A tally carries nothing else, and says nothing of what the log
		// covered.
		r.specDrafted += iv.SpecDrafted * f
		r.specAccepted += max(iv.SpecAccepted, 0) * f
		return
	}
	r.n++
	if iv.Tokens >= 0 {
		r.tokens += iv.Tokens * f
		r.hasTok = true
	}
	if iv.PromptTokens >= 0 {
		r.prompt += iv.PromptTokens * promptF
		r.hasPrmpt = true
	}
	if iv.PromptCached >= 0 {
		r.cached += iv.PromptCached * f
		r.hasCached = true
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
}

// windowAcc sums the intervals that lie inside one window as they come,
// so a chatty log costs memory per window, not per line.
type windowAcc struct {
	sums  [2]ivSums // [0]: spread-back metrics, [1]: log lines (Observed)
	cover []seg     // observed time, disjoint, in order
	// holes are what refused lines spoke for, disjoint, in order: not
	// observed, whatever else says so.
	holes []seg
	// reqs are the finished requests whose own lines ended in the window;
	// unkept counts them instead past MaxRequests (reqs then nil).
	reqs   []RequestTimes
	unkept int
}

// coverLess is how much of segs, disjoint and in order, lies outside the
// holes.
func (a *windowAcc) coverLess(segs []seg) time.Duration {
	total := covered(segs)
	for _, h := range a.holes {
		for _, sg := range segs {
			lo, hi := sg.a, sg.b
			if lo.Before(h.a) {
				lo = h.a
			}
			if hi.After(h.b) {
				hi = h.b
			}
			if hi.After(lo) {
				total -= hi.Sub(lo)
			}
		}
	}
	return total
}

type seg struct{ a, b time.Time }

// addCover merges (a, b] into the disjoint segments; log lines come in
// order, so this nearly always extends or appends the last one.
func addCover(segs []seg, a, b time.Time) []seg {
	if !b.After(a) {
		return segs
	}
	if n := len(segs); n > 0 && !a.Before(segs[n-1].a) && !a.After(segs[n-1].b) {
		// The usual case: it extends the last one, or lies inside it.
		if b.After(segs[n-1].b) {
			segs[n-1].b = b
		}
		return segs
	}
	i := len(segs)
	for i > 0 && segs[i-1].a.After(a) {
		i--
	}
	segs = append(segs, seg{})
	copy(segs[i+1:], segs[i:])
	segs[i] = seg{a, b}
	// Merge neighbours that touch or overlap.
	out := segs[:0]
	for _, sg := range segs {
		if n := len(out); n > 0 && !sg.a.After(out[n-1].b) {
			if sg.b.After(out[n-1].b) {
				out[n-1].b = sg.b
			}
			continue
		}
		out = append(out, sg)
	}
	return out
}

// covered is how much time the segments span.
func covered(segs []seg) time.Duration {
	var total time.Duration
	for _, sg := range segs {
		total += sg.b.Sub(sg.a)
	}
	return total
}
