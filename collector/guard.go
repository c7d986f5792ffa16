package collector

import (
	"math"
	"sync"
	"time"
)

// Physical bounds on what one inference server can report. A value beyond
// them is a glitch (a corrupted page, a misprinted log line), not data:
// it is discarded and counted instead of reaching a window.
const (
	// MaxTokensPerSecond bounds every token rate of one server. The fastest
	// single servers (a node of eight current GPUs) make on the order of
	// 1e5 output tokens/s and a few 1e5 prompt tokens/s; 1e7 leaves a
	// hundredfold headroom and still rejects the 1e20 of a broken counter.
	// It is also the most tokens a window can hold per second of its length.
	MaxTokensPerSecond = 1e7
	// MaxRequests bounds request gauges (running, waiting) and the rate at
	// which latency seconds can accumulate (one second per second and
	// concurrent request).
	MaxRequests = 1e6
	// MaxCounter is the largest counter value taken: above 2^53 a float64
	// no longer counts single tokens, so increments would be lost.
	MaxCounter = 1 << 53
	// MaxIntervalSpan bounds the time one log line speaks for: no request
	// runs for a day, and no stat line averages over one. A longer span is
	// a misprinted duration; spread over it, the line's tokens would fill
	// days of windows with a wrong rate.
	MaxIntervalSpan = 24 * time.Hour
)

// Reason says why a value was discarded.
type Reason int

// The reasons a value is discarded.
const (
	NotANumber Reason = iota // NaN
	Infinite                 // ±Inf
	Negative                 // below zero, which no count or gauge can be
	Huge                     // beyond its kind's physical bound
	Jump                     // a counter grew faster than the bound allows
	Flap                     // a counter fell and the next reading did not confirm a restart
	OutOfRange               // a time outside [MinTime, MaxTime], a reading below its range
	NumReasons
)

var reasonNames = [NumReasons]string{"nan", "inf", "negative", "huge", "jump", "flap", "range"}

// MinTime and MaxTime bound the times tpsmon joins: line protocol stamps a
// point with int64 nanoseconds since 1970 (1677-09-21 to 2262-04-11), and
// windows are aligned on them; a day less at each end, so that a window
// around a time inside is inside too. A log line stamped beyond (a
// misprinted year) is refused, not joined into windows of another century.
var (
	MinTime = time.Unix(0, math.MinInt64).Add(24 * time.Hour)
	MaxTime = time.Unix(0, math.MaxInt64).Add(-24 * time.Hour)
)

// InRange says whether t is within [MinTime, MaxTime].
func InRange(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }

func (r Reason) String() string { return reasonNames[r] }

// Discard is one value a Guard refused.
type Discard struct {
	Series string // the counter or gauge, as named by String
	Reason Reason
}

// Guard validates one server's readings before they touch a counter. It
// remembers each counter's last accepted reading, so that an implausible
// jump is caught, and holds a decrease back until the next reading says
// whether it was a restart (which then counts from the new value) or a
// flap between two values (which must not count the difference twice).
// One Guard per server; the zero value is ready.
type Guard struct {
	counters [NumCounters]guarded
}

type guarded struct {
	ok  bool
	v   float64 // last accepted reading, as the source printed it
	t   time.Time
	off float64 // subtracted from readings after a confirmed level shift
	// A decrease waiting for the next reading to confirm a restart.
	held  bool
	hv    float64
	ht    time.Time
	jumps int // consecutive rejected jumps that agree with each other
	jv    float64
	jt    time.Time
}

// rebaseAfter is how many consecutive jumps, each plausible from the one
// before, make a new level: a counter that really moved (a source that
// keeps its counts across processes) is followed again, without counting
// the step.
const rebaseAfter = 3

// counterRate is how fast each counter can grow per second: token counts
// at the token bound, summed latency seconds at one second per request.
func counterRate(c Counter) float64 {
	switch c {
	case ITLSum, CompletionSeconds:
		return MaxRequests
	}
	return MaxTokensPerSecond
}

// completionSlack is how far back completion-time counters may reach: a
// request finishing now can have been generating for maxSpread.
func completionSlack(c Counter) time.Duration {
	switch c {
	case CompletionTokens, CompletionSeconds, CompletionRequests:
		return maxSpread
	}
	return 0
}

// valueReason checks one value on its own; ok when it is a plausible
// reading of its kind (0 up to limit).
func valueReason(v, limit float64) (Reason, bool) { return RangeReason(v, 0, limit) }

// RangeReason says why v is no reading in [lo, hi], if it is not: NaN,
// ±Inf, below zero where lo is not (Negative), below lo (OutOfRange), or
// above hi (Huge).
func RangeReason(v, lo, hi float64) (Reason, bool) {
	switch {
	case math.IsNaN(v):
		return NotANumber, false
	case math.IsInf(v, 0):
		return Infinite, false
	case v < 0 && lo >= 0:
		return Negative, false
	case v < lo:
		return OutOfRange, false
	case v > hi:
		return Huge, false
	}
	return 0, true
}

// gaugeLimit bounds each gauge.
func gaugeLimit(g Gauge) float64 {
	switch g {
	case KVUsage:
		return 1 // a ratio; engines that print percent are converted when read
	case GenRate:
		return MaxTokensPerSecond
	}
	return MaxRequests
}

// Check removes the values of s that cannot be right and returns what
// went and why. The sample keeps its valid values; s.Discarded counts the
// values it lost, a decrease held for confirmation included.
func (g *Guard) Check(s *Sample) []Discard {
	var out []Discard
	for c := range NumCounters {
		if !s.HasCounter[c] {
			continue
		}
		v, r, flapped := g.counters[c].accept(c, s.Time, s.Counter[c])
		if flapped {
			out = append(out, Discard{Series: c.String(), Reason: Flap})
		}
		if r == accepted {
			s.Counter[c] = v
			continue
		}
		s.HasCounter[c], s.Counter[c] = false, 0
		s.Discarded++
		if r != held {
			out = append(out, Discard{Series: c.String(), Reason: r})
		}
	}
	for k := range NumGauges {
		if !s.HasGauge[k] {
			continue
		}
		if r, ok := valueReason(s.Gauge[k], gaugeLimit(k)); !ok {
			s.HasGauge[k], s.Gauge[k] = false, 0
			s.Discarded++
			out = append(out, Discard{Series: k.String(), Reason: r})
		}
	}
	return out
}

// Verdicts of accept besides the Reasons.
const (
	accepted Reason = -1 - iota
	held
)

// accept decides on one counter reading: the value to pass on, accepted
// or held or the reason it went; flapped says an earlier held decrease
// turned out to be a flap.
func (st *guarded) accept(c Counter, t time.Time, v float64) (float64, Reason, bool) {
	if r, ok := valueReason(v, MaxCounter); !ok {
		return 0, r, false
	}
	if !st.ok {
		st.ok, st.v, st.t = true, v, t
		return v, accepted, false
	}
	if !t.After(st.t) {
		return v - st.off, accepted, false // not newer: the joiner ignores it
	}
	bound := func(since time.Time) float64 {
		return counterRate(c) * (t.Sub(since) + completionSlack(c)).Seconds()
	}
	if v >= st.v {
		flapped := st.held
		st.held = false
		if v-st.v > bound(st.t) {
			if st.jumps > 0 && v >= st.jv && v-st.jv <= bound(st.jt) {
				st.jumps++
			} else {
				st.jumps = 1
			}
			st.jv, st.jt = v, t
			if st.jumps < rebaseAfter {
				return 0, Jump, flapped
			}
			// A new level: carry on from it, the step itself not counted.
			st.off += v - st.v
		}
		st.jumps = 0
		st.v, st.t = v, t
		return v - st.off, accepted, flapped
	}
	st.jumps = 0
	// A decrease: a restart only if the next reading carries on from it.
	if st.held && v >= st.hv && v-st.hv <= bound(st.ht) {
		st.held = false
		st.v, st.t, st.off = v, t, 0
		return v, accepted, false
	}
	flapped := st.held
	st.held, st.hv, st.ht = true, v, t
	return 0, held, flapped
}

// CheckInterval validates what a log line (or a count spread back over
// time) says of (Start, End]: every value must be finite, not negative
// (-1 is "unknown") and within its bound; token counts within
// MaxTokensPerSecond over the interval, a second at least; the interval
// itself within [MinTime, MaxTime] and no longer than MaxIntervalSpan. An
// interval with any impossible value is refused whole: one broken figure
// makes the line's others doubtful too.
func CheckInterval(iv Interval) (Discard, bool) {
	span := iv.End.Sub(iv.Start)
	secs := max(span.Seconds(), 1)
	tok := MaxTokensPerSecond * secs
	// Every log line comes here: the common case, all values unknown or in
	// range, is a few comparisons (NaN fails them all); the checks below
	// say which value is wrong and why.
	if unknownOrIn(iv.Tokens, tok) && unknownOrIn(iv.PromptTokens, tok) && unknownOrIn(iv.UserTokens, tok) &&
		unknownOrIn(iv.UserSeconds, MaxRequests*secs) && unknownOrIn(iv.Preemptions, tok) &&
		unknownOrIn(iv.Running, MaxRequests) && unknownOrIn(iv.Waiting, MaxRequests) && unknownOrIn(iv.KV, 1) &&
		InRange(iv.Start) && InRange(iv.End) && !iv.End.Before(iv.Start) && span <= MaxIntervalSpan {
		return Discard{}, true
	}
	return intervalDiscard(iv, secs, tok)
}

// intervalDiscard says which of the interval's values is wrong, in the
// order they are checked.
func intervalDiscard(iv Interval, secs, tok float64) (Discard, bool) {
	for _, f := range [...]struct {
		name     string
		v, limit float64
	}{
		{"tokens", iv.Tokens, tok},
		{"prompt_tokens", iv.PromptTokens, tok},
		{"user_tokens", iv.UserTokens, tok},
		{"user_seconds", iv.UserSeconds, MaxRequests * secs},
		{"preemptions", iv.Preemptions, tok},
		{"running", iv.Running, MaxRequests},
		{"waiting", iv.Waiting, MaxRequests},
		{"kv_cache_usage", iv.KV, 1},
	} {
		if f.v == -1 {
			continue
		}
		if r, ok := valueReason(f.v, f.limit); !ok {
			return Discard{Series: f.name, Reason: r}, false
		}
	}
	if !InRange(iv.Start) || !InRange(iv.End) {
		return Discard{Series: "interval", Reason: OutOfRange}, false
	}
	if iv.End.Before(iv.Start) {
		return Discard{Series: "interval", Reason: Negative}, false
	}
	if iv.End.Sub(iv.Start) > MaxIntervalSpan {
		return Discard{Series: "interval", Reason: Huge}, false
	}
	return Discard{}, true
}

// unknownOrIn tells whether v is unknown (-1) or in [0, limit].
func unknownOrIn(v, limit float64) bool { return v == -1 || v >= 0 && v <= limit }

// DiscardCounts counts discarded values per server and reason, for the
// daemon's /metrics. Safe for concurrent use; the zero value is ready.
type DiscardCounts struct {
	mu sync.Mutex
	n  map[discardKey]uint64
}

type discardKey struct {
	server string
	reason Reason
}

// Add counts one discarded value of server.
func (c *DiscardCounts) Add(server string, d Discard) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[discardKey]uint64{}
	}
	c.n[discardKey{server, d.Reason}]++
}

// Each calls f with every count so far.
func (c *DiscardCounts) Each(f func(server string, r Reason, n uint64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		f(k.server, k.reason, n)
	}
}
