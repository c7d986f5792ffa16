package collector

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Guard validates one server's readings before they touch a counter. It
// remembers each counter's last accepted reading, so that an implausible
// jump is caught, and holds a decrease back until the next reading says
// whether it was a restart (which then counts from the new value) or a
// flap between two values (which must not count the difference twice).
//
// A series that cannot be one process's counter (two replicas behind one
// URL answering in turn, a page that flaps up or down) is never made a
// rate: a fall to more than a restarted process can have counted yet that
// the next reading carries on from, two falls in a row, or a second flap
// back across the same step makes the server suspect. Its counters are
// then untrusted: the sample says since when (Sample.Rewind, the oldest
// reading remembered), the joiner forgets what they said since,
// and they are dropped (Suspect) until they have read as one growing
// series for quietReadings scrapes in a row; they are then followed again
// from there, the untrusted span a hole, not tokens.
// One Guard per server; the zero value is ready.
type Guard struct {
	counters [sample.NumCounters]guarded
	suspect  bool
	quiet    int // readings in a row, while suspect, in which no counter fell or stepped
}

type guarded struct {
	ok  bool
	v   float64 // last accepted reading, as the source printed it
	t   time.Time
	off float64 // subtracted from readings after a confirmed level shift
	// A decrease waiting for the next reading to confirm a restart.
	held   bool
	hfresh bool // the held decrease can be a restarted process's count
	hv     float64
	ht     time.Time
	jumps  int // consecutive rejected jumps that agree with each other
	jv     float64
	jt     time.Time
	// The last accepted readings, oldest first from hi once full: the
	// counter's pace (no restarted process counts faster), what a flap is
	// compared with, and where an untrusted span begins.
	hist   [histLen]histPoint
	hn, hi int
	own    int // of them, read since the last restart: this process's
	// step is where the readings above a stale page last entered with a
	// step (Unix nanoseconds of the reading before it).
	step int64
	// While the server is suspect: the last reading, to see it grow at
	// no more than restartRateFactor times the pace it had (fast).
	sv   float64
	st   time.Time
	sok  bool
	fast float64
}

type histPoint struct {
	t int64 // Unix nanoseconds
	v float64
}

const (
	// histLen is how many accepted readings a counter remembers: the
	// longest run of one replica's answers that is still undone when the
	// other answers again. A power of two.
	histLen = 64
	// quietReadings is how many readings in a row a suspect server's
	// counters must grow at their pace (none falls or steps up) before
	// they are trusted again. More
	// than MaxGap's 2.5 scrape intervals, so the untrusted span stays a
	// hole in coverage.
	quietReadings = 16
	// restartRateFactor: a restarted process counts at most this many
	// times the counter's pace (rates) over the time since the last
	// reading; a rise faster than this many times every other is a step.
	// restartFloor is the least pace, as a share of the counter's bound.
	restartRateFactor = 4
	restartFloor      = 1e-4
)

func (st *guarded) push(t time.Time, v float64) {
	st.hist[st.hi] = histPoint{t.UnixNano(), v}
	st.hi = (st.hi + 1) & (histLen - 1) // histLen is a power of two
	st.hn = min(st.hn+1, histLen)
	st.own = min(st.own+1, histLen)
}

// at returns the i-th newest remembered reading (0: the newest).
func (st *guarded) at(i int) histPoint { return st.hist[(st.hi-1-i+2*histLen)&(histLen-1)] }

// rates returns the rises per second of the remembered readings, newest
// first (rates[i] is from at(i+1) to at(i)), and the counter's pace, which
// steps (another series, a page that flaps) do not set even when they are
// most of the rises: their lower quartile, at least restartFloor of the
// counter's bound.
func (st *guarded) rates(c sample.Counter) (rates [histLen]float64, n int, pace float64) {
	for i := 0; i+1 < st.own; i++ {
		p, q := st.at(i), st.at(i+1)
		if dt := float64(p.t-q.t) / 1e9; dt > 0 {
			rates[n] = (p.v - q.v) / dt
		}
		n++
	}
	if n >= 4 { // fewer are no pace: a step may be most of them
		sorted := rates
		slices.Sort(sorted[:n])
		pace = sorted[n/4]
	}
	return rates, n, max(pace, restartFloor*counterRate(c))
}

// stepSlack is the rise per second below which no rise is a step.
func stepSlack(c sample.Counter) float64 { return 1e-5 * counterRate(c) }

// fresh says whether v, below the last reading, can be a restarted
// process's first count: no more than it can have counted since the last
// reading at restartRateFactor times the counter's remembered pace.
func (st *guarded) fresh(c sample.Counter, t time.Time, v float64) bool {
	_, _, pace := st.rates(c)
	return v <= restartRateFactor*pace*t.Sub(st.t).Seconds()
}

// since returns when the readings in doubt may have begun: at the oldest
// one remembered. Which of the series behind the flapping one was read
// when is not known: one that stepped over to another long ago looks like
// a burst until the other is read again, so everything remembered is in
// doubt (the joiner forgets no more than its open windows hold).
func (st *guarded) since() int64 {
	if st.hn == 0 {
		return st.t.UnixNano()
	}
	return st.at(st.hn - 1).t
}

// rebase forgets the counter's past: its next reading is its first.
func (st *guarded) rebase() { *st = guarded{} }

// rebaseAfter is how many consecutive jumps, each plausible from the one
// before, make a new level: a counter that really moved (a source that
// keeps its counts across processes) is followed again, without counting
// the step.
const rebaseAfter = 3

// counterRate is how fast each counter can grow per second: token counts
// at the token bound, summed latency seconds at one second per request.
func counterRate(c sample.Counter) float64 {
	switch c {
	case sample.ITLSum, sample.CompletionSeconds:
		return sample.MaxRequests
	}
	return sample.MaxTokensPerSecond
}

// completionSlack is how far back completion-time counters may reach: a
// request finishing now can have been generating for maxSpread.
func completionSlack(c sample.Counter) time.Duration {
	switch c {
	case sample.CompletionTokens, sample.CompletionSeconds, sample.CompletionRequests:
		return maxSpread
	}
	return 0
}

// valueReason checks one value on its own; ok when it is a plausible
// reading of its kind (0 up to limit).
func valueReason(v, limit float64) (sample.Reason, bool) { return sample.RangeReason(v, 0, limit) }

// gaugeLimit bounds each gauge.
func gaugeLimit(g sample.Gauge) float64 {
	switch g {
	case sample.KVUsage:
		return 1 // a ratio; engines that print percent are converted when read
	case sample.GenRate:
		return sample.MaxTokensPerSecond
	}
	return sample.MaxRequests
}

// Check removes the values of s that cannot be right and returns what
// went and why. The sample keeps its valid values; s.Discarded counts the
// counters it lost, a decrease held for confirmation included (a lost
// gauge costs only itself: the window's tokens are still known). A
// server that turns suspect sets s.Rewind; s.Suspect says its counters
// are untrusted.
func (g *Guard) Check(s *sample.Server) []sample.Discard {
	var out []sample.Discard
	if g.suspect {
		out = g.checkSuspect(s, out)
	} else {
		out = g.checkCounters(s, out)
	}
	for k := range sample.NumGauges {
		if !s.HasGauge[k] {
			continue
		}
		if r, ok := valueReason(s.Gauge[k], gaugeLimit(k)); !ok {
			s.HasGauge[k], s.Gauge[k] = false, 0
			out = append(out, sample.Discard{Series: k.String(), Reason: r})
		}
	}
	return out
}

// verdict is accept's decision on one reading.
type verdict struct {
	v       float64       // the value to pass on, when accepted
	r       sample.Reason // accepted, held, or why it went
	flapped bool          // an earlier held decrease was a flap
	// evidence: the series cannot be one process's counter.
	evidence bool
}

func (g *Guard) checkCounters(s *sample.Server, out []sample.Discard) []sample.Discard {
	for c := range sample.NumCounters {
		if !s.HasCounter[c] {
			continue
		}
		vd := g.counters[c].accept(c, s.Time, s.Counter[c])
		if vd.evidence {
			return g.turnSuspect(s, c, out)
		}
		if vd.flapped {
			out = append(out, sample.Discard{Series: c.String(), Reason: sample.Flap})
		}
		if vd.r == accepted {
			s.Counter[c] = vd.v
			continue
		}
		s.HasCounter[c], s.Counter[c] = false, 0
		s.Discarded++
		if vd.r != held {
			out = append(out, sample.Discard{Series: c.String(), Reason: vd.r})
		}
	}
	return out
}

// turnSuspect starts an episode at counter flapped of s: every counter of
// s still there is dropped, that one as a flap, and the joiner told to
// forget what the counters said since the oldest reading remembered (see
// since).
func (g *Guard) turnSuspect(s *sample.Server, flapped sample.Counter, out []sample.Discard) []sample.Discard {
	g.suspect, g.quiet = true, 0
	since := int64(math.MaxInt64)
	for c := range sample.NumCounters {
		st := &g.counters[c]
		if st.ok {
			since = min(since, st.since())
		}
		st.sv, st.st, st.sok = st.v, st.t, st.ok
		_, _, pace := st.rates(c)
		st.fast = restartRateFactor*pace + stepSlack(c)
		if !s.HasCounter[c] {
			continue
		}
		r := sample.Suspect
		if c == flapped {
			r = sample.Flap
		} else if c > flapped {
			// Not judged yet: a reading no series can give still says why.
			if why, ok := valueReason(s.Counter[c], sample.MaxCounter); !ok {
				r = why
			}
		}
		if r == sample.Suspect || r == sample.Flap {
			st.sv, st.st, st.sok = s.Counter[c], s.Time, true
		}
		s.HasCounter[c], s.Counter[c] = false, 0
		s.Discarded++
		out = append(out, sample.Discard{Series: c.String(), Reason: r})
	}
	if since == math.MaxInt64 {
		since = s.Time.UnixNano()
	}
	s.Rewind, s.Suspect = time.Unix(0, since), true
	return out
}

// checkSuspect drops the counters of a suspect server, counting how long
// they have grown at their pace (neither falling nor stepping up); once
// they have for quietReadings, they are followed again from this reading,
// the span before forgotten.
func (g *Guard) checkSuspect(s *sample.Server, out []sample.Discard) []sample.Discard {
	fell := false
	for c := range sample.NumCounters {
		if !s.HasCounter[c] {
			continue
		}
		st := &g.counters[c]
		v := s.Counter[c]
		if r, ok := valueReason(v, sample.MaxCounter); !ok {
			s.HasCounter[c], s.Counter[c] = false, 0
			s.Discarded++
			out = append(out, sample.Discard{Series: c.String(), Reason: r})
			continue
		}
		// Falling, or rising in a step: still more than one series.
		if st.sok && (v < st.sv || v-st.sv > st.fast*s.Time.Sub(st.st).Seconds()) {
			fell = true
		}
		st.sv, st.st, st.sok = v, s.Time, true
	}
	g.quiet++
	if fell {
		g.quiet = 0
	}
	if g.quiet < quietReadings {
		for c := range sample.NumCounters {
			if s.HasCounter[c] {
				s.HasCounter[c], s.Counter[c] = false, 0
				s.Discarded++
				out = append(out, sample.Discard{Series: c.String(), Reason: sample.Suspect})
			}
		}
		s.Suspect = true
		return out
	}
	// Trusted again: every counter starts from this reading.
	g.suspect, g.quiet = false, 0
	for c := range sample.NumCounters {
		st := &g.counters[c]
		st.rebase()
		if s.HasCounter[c] {
			st.accept(c, s.Time, s.Counter[c])
		}
	}
	return out
}

// Verdicts of accept besides the Reasons.
const (
	accepted sample.Reason = -1 - iota
	held
)

// accept decides on one counter reading: the value to pass on, accepted
// or held or the reason it went; whether an earlier held decrease turned
// out to be a flap; whether the series showed it is no single counter.
func (st *guarded) accept(c sample.Counter, t time.Time, v float64) verdict {
	if r, ok := valueReason(v, sample.MaxCounter); !ok {
		return verdict{r: r}
	}
	if !st.ok {
		st.ok, st.v, st.t = true, v, t
		st.push(t, v)
		return verdict{v: v, r: accepted}
	}
	if !t.After(st.t) {
		return verdict{v: v - st.off, r: accepted} // not newer: the joiner ignores it
	}
	bound := func(since time.Time) float64 {
		return counterRate(c) * (t.Sub(since) + completionSlack(c)).Seconds()
	}
	if v >= st.v {
		flapped := st.held
		if st.held {
			st.held = false
			// Down and back up: a stale page, dropped, where the series
			// above carries on smoothly from where it met the lower
			// reading, or where it entered with a step (a burst) the first
			// time. A second flap back across the same step says two
			// series, or a page that flaps up.
			if step, ok := st.stepped(c, t, v); ok {
				if step == st.step {
					return verdict{r: sample.Flap, flapped: true, evidence: true}
				}
				st.step = step
			}
		}
		if v-st.v > bound(st.t) {
			if st.jumps > 0 && v >= st.jv && v-st.jv <= bound(st.jt) {
				st.jumps++
			} else {
				st.jumps = 1
			}
			st.jv, st.jt = v, t
			if st.jumps < rebaseAfter {
				return verdict{r: sample.Jump, flapped: flapped}
			}
			// A new level: carry on from it, the step itself not counted.
			st.off += v - st.v
		}
		st.jumps = 0
		st.v, st.t = v, t
		st.push(t, v)
		return verdict{v: v - st.off, r: accepted, flapped: flapped}
	}
	st.jumps = 0
	// A decrease: a restart only if the next reading carries on from it
	// and it can be a restarted process's count.
	if st.held {
		st.held = false
		if v >= st.hv && v-st.hv <= bound(st.ht) && st.hfresh {
			st.v, st.t, st.off, st.own = v, t, 0, 0
			st.push(t, v)
			return verdict{v: v, r: accepted}
		}
		// Down and carrying on below, from more than a restarted process
		// can have counted, or down twice: another series.
		return verdict{r: sample.Flap, flapped: true, evidence: true}
	}
	st.held, st.hv, st.ht, st.hfresh = true, v, t, st.fresh(c, t, v)
	return verdict{r: held}
}

// stepped says whether the remembered readings above the held one
// entered with a step, and where (the time of the reading before it): the
// rise from the newest reading at or below it to the next was faster than
// restartRateFactor times any other remembered rise, the one to v at t
// included. Where none is at or below it, whether any rise is such a step.
func (st *guarded) stepped(c sample.Counter, t time.Time, v float64) (int64, bool) {
	k := -1
	for i := 0; i < st.own; i++ {
		if st.at(i).v <= st.hv {
			k = i
			break
		}
	}
	cur := 0.0
	if dt := t.Sub(st.t).Seconds(); dt > 0 {
		cur = (v - st.v) / dt
	}
	rates, n, _ := st.rates(c)
	if k > 0 {
		entry := rates[k-1]
		peak := cur
		for i := range n {
			if i != k-1 {
				peak = max(peak, rates[i])
			}
		}
		return st.at(k).t, entry > restartRateFactor*peak+stepSlack(c)
	}
	first, second, at := cur, 0.0, st.t.UnixNano()
	for i, r := range rates[:n] {
		if r > first {
			first, second, at = r, first, st.at(i+1).t
		} else if r > second {
			second = r
		}
	}
	return at, first > restartRateFactor*second+stepSlack(c)
}

// DiscardCounts counts discarded values per server and reason, for the
// daemon's /metrics. Safe for concurrent use; the zero value is ready.
type DiscardCounts struct {
	mu sync.Mutex
	n  map[discardKey]uint64
}

type discardKey struct {
	server string
	reason sample.Reason
}

// Add counts one discarded value of server.
func (c *DiscardCounts) Add(server string, d sample.Discard) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[discardKey]uint64{}
	}
	c.n[discardKey{server, d.Reason}]++
}

// Each calls f with every count so far.
func (c *DiscardCounts) Each(f func(server string, r sample.Reason, n uint64)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.n {
		f(k.server, k.reason, n)
	}
}
