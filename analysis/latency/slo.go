package latency

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Objective is a server's latency promise: time to first token, time per
// output token (a request's decode time over its tokens after the first)
// and end-to-end latency. A zero duration sets no objective of that kind.
type Objective struct {
	TTFT time.Duration `mapstructure:"ttft"`
	TPOT time.Duration `mapstructure:"tpot"`
	E2E  time.Duration `mapstructure:"e2e"`
}

// MaxObjective bounds an objective: a promise of more than an hour per
// request (or per token) is a typo, not an objective.
const MaxObjective = time.Hour

// ErrObjective marks an objective that cannot be one.
var ErrObjective = errors.New("invalid latency objective")

// Validate refuses negative and absurd objectives, naming the one.
func (o Objective) Validate() error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ttft", o.TTFT}, {"tpot", o.TPOT}, {"e2e", o.E2E}} {
		switch {
		case f.d < 0:
			return fmt.Errorf("%s: %w: %v is negative", f.name, ErrObjective, f.d)
		case f.d > MaxObjective:
			return fmt.Errorf("%s: %w: %v is longer than %v", f.name, ErrObjective, f.d, MaxObjective)
		}
	}
	return nil
}

// Set tells whether any objective is given.
func (o Objective) Set() bool { return o.TTFT > 0 || o.TPOT > 0 || o.E2E > 0 }

// Request is what one request's own line said: seconds (NaN when the
// engine does not say), its output tokens, and whether the server aborted
// it or it failed (a miss, whatever its latencies).
type Request struct {
	TTFT, TPOT, E2E float64
	OutputTokens    float64
	Failed          bool
}

// Attainment is the share of a window's requests that met every
// objective given, and the goodput they make.
//
// From per-request values it is exact (Lo = Hi), unless a request lacks
// a value an objective needs: it is then counted a miss for Lo and a hit
// for Hi. From marginal histograms it is bounded: each objective's share
// is exact only when the objective sits on a bucket edge, and the share
// of requests meeting two objectives cannot be known from two marginal
// distributions: it lies in max(0, a+b-1) ≤ joint ≤ min(a, b) (Fréchet's
// bounds; Joint says they were used).
type Attainment struct {
	Lo, Hi   float64 // share of the requests, 0..1
	Exact    bool    // Lo == Hi, known exactly
	Joint    bool    // bounded from marginals
	Requests float64 // the requests it is over
	// MetLo and MetHi bound how many requests met every objective.
	MetLo, MetHi float64
	// Missed is, per objective (TTFT, TPOT, E2E), the most of the
	// requests' share that can have missed it (0 where not set).
	Missed [3]float64
	// GoodTokensLo, GoodTokensHi bound the output tokens of those
	// requests; NaN when unknown (histograms).
	GoodTokensLo, GoodTokensHi float64
	OK                         bool
	Reason                     string
}

// Goodput returns the requests and output tokens per second that met the
// objectives over a window of secs observed seconds: low and high bounds,
// the tokens NaN where unknown.
func (a Attainment) Goodput(secs float64) (rpsLo, rpsHi, tpsLo, tpsHi float64) {
	if !a.OK || secs <= 0 {
		return math.NaN(), math.NaN(), math.NaN(), math.NaN()
	}
	return a.MetLo / secs, a.MetHi / secs, a.GoodTokensLo / secs, a.GoodTokensHi / secs
}

// FromRequests is the attainment of the requests that finished in a window.
func FromRequests(reqs []Request, o Objective) Attainment {
	out := Attainment{Requests: float64(len(reqs))}
	switch {
	case !o.Set():
		out.Reason = "no objective set"
		return out
	case len(reqs) == 0:
		out.Reason = "no requests finished"
		return out
	}
	limits := [3]float64{o.TTFT.Seconds(), o.TPOT.Seconds(), o.E2E.Seconds()}
	for _, r := range reqs {
		if r.Failed {
			continue
		}
		vals := [3]float64{r.TTFT, r.TPOT, r.E2E}
		met, known := true, true
		for i, lim := range limits {
			if lim <= 0 {
				continue
			}
			switch v := vals[i]; {
			case math.IsNaN(v):
				known = false
				out.Missed[i]++
			case v > lim:
				met = false
				out.Missed[i]++
			}
		}
		if !met {
			continue
		}
		tok := r.OutputTokens
		if math.IsNaN(tok) {
			out.GoodTokensLo = math.NaN()
		}
		out.MetHi++
		out.GoodTokensHi += tok
		if known {
			out.MetLo++
			out.GoodTokensLo += tok
		}
	}
	for i := range out.Missed {
		out.Missed[i] /= out.Requests
	}
	out.Lo, out.Hi = out.MetLo/out.Requests, out.MetHi/out.Requests
	out.Exact, out.OK = out.Lo == out.Hi, true
	return out
}

// Marginal is one objective read against the histogram of its quantity
// over a window: the objective in seconds and the bucket deltas.
type Marginal struct {
	H         Histogram
	Objective float64
	// Kind is the objective's index in Attainment.Missed (0 TTFT, 1 TPOT,
	// 2 E2E).
	Kind int
}

// FromHistograms bounds the attainment from one histogram per objective
// given. failed is the requests the server aborted or that errored in the
// window (their finished_reason), misses whatever they measured; whether
// the engine observed them in its latency histograms or not, the bounds
// hold: a share is at least (met − failed)/(n + failed) and at most
// max(min(met, n − failed)/n, met/(n + failed)).
func FromHistograms(ms []Marginal, failed float64) Attainment {
	out := Attainment{GoodTokensLo: math.NaN(), GoodTokensHi: math.NaN()}
	if len(ms) == 0 {
		out.Reason = "no objective set"
		return out
	}
	if math.IsNaN(failed) || failed < 0 {
		failed = 0
	}
	sumLo, hi := 0.0, 1.0
	exact := true
	for _, m := range ms {
		if err := m.H.Check(); err != nil {
			out.Reason = err.Error()
			return out
		}
		n := m.H.Count()
		if n+failed <= 0 {
			out.Reason = "no requests observed"
			return out
		}
		metLo, metHi, onEdge := m.H.AtMost(m.Objective)
		aLo := math.Max(0, metLo-failed) / (n + failed)
		aHi := metHi / (n + failed)
		if n > 0 {
			aHi = math.Max(aHi, math.Min(metHi, math.Max(0, n-failed))/n)
		}
		if failed > 0 || !onEdge {
			exact = false
		}
		sumLo += aLo
		out.Missed[m.Kind] = 1 - aLo
		hi = math.Min(hi, aHi)
		out.Requests = math.Max(out.Requests, n+failed)
	}
	// Fréchet: Σa − (k−1) ≤ joint ≤ min a; exact only where they meet
	// (a share of 0 or 1).
	lo := math.Max(0, sumLo-float64(len(ms)-1))
	out.Joint = len(ms) > 1
	out.Lo, out.Hi = lo, math.Max(lo, hi)
	out.Exact = exact && out.Lo == out.Hi
	out.MetLo, out.MetHi = out.Lo*out.Requests, out.Hi*out.Requests
	out.OK = true
	return out
}

// Where names the phase of a request that took the most of its time over
// a window: "queue" (waiting for the scheduler), "prefill" (its prompt,
// up to its first token) or "decode" (its output). Means in seconds, NaN
// or negative when the engine does not say; "" when none is known.
//
// MissPhase is the phase to blame for missed objectives: of the objective
// most requests missed, its phase: time to first token is the queue and
// the prefill (the longer of the two), time per token the decode, end to
// end whichever phase took longest.
func MissPhase(a Attainment, queue, prefill, decode float64) string {
	worst, share := -1, 0.0
	for i, m := range a.Missed {
		if m > share {
			worst, share = i, m
		}
	}
	switch worst {
	case 0:
		if p := Where(queue, prefill, math.NaN()); p != "" {
			return p
		}
		return "prefill"
	case 1:
		return "decode"
	case 2:
		return Where(queue, prefill, decode)
	}
	return ""
}

// Where names the longest of the phases.
func Where(queue, prefill, decode float64) string {
	best, name := math.Inf(-1), ""
	for _, p := range []struct {
		name string
		v    float64
	}{{"queue", queue}, {"prefill", prefill}, {"decode", decode}} {
		if !math.IsNaN(p.v) && p.v >= 0 && p.v > best {
			best, name = p.v, p.name
		}
	}
	return name
}
