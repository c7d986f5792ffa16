package logline

import (
	"bytes"
	"slices"
	"strings"
	"time"
)

// Placed is a throughput record with the time replay gives it.
type Placed struct {
	Record
	Time time.Time
}

// FarLimit is how far apart the timestamps around an untimed line may be
// for its placement to count as near: beyond it replay warns.
const FarLimit = 2 * time.Second

// Placer gives every throughput line of a recorded log a time. A line with
// its own timestamp keeps it. A line without one (Ollama relays
// llama-server's timing lines bare) takes the best evidence around it:
//   - the [GIN] access line that closes the request, whose time (to the
//     second) and duration give the request's end, to the millisecond when
//     a timestamped line at the request's start matches;
//   - else the timestamped lines before and after it, the untimed lines
//     spread evenly between the two in their order. Where those are more
//     than FarLimit apart, the lines count as Far.
type Placer struct {
	P *Parser
	// Emit, when set, is handed each record as it is placed, in the
	// order Close would return them, and Close returns none: a long log's
	// records need not be kept.
	Emit func(Placed)

	out     []Placed
	pending []Record  // untimed records waiting for evidence
	prev    time.Time // the last timestamp before the pending records
	last    time.Time // the last timestamp seen
	starts  []start   // recent timestamps, candidates for a request's start
	gin     bool      // the log has [GIN] lines: untimed lines wait for theirs
	// Far counts records placed by timestamps more than FarLimit apart;
	// Untimed, records with no timestamp before or after them at all.
	Far, Untimed int
	// ByGIN counts records placed by the [GIN] line of their request.
	ByGIN int

	chains map[string]*chain // by reporter (Record.Key), for lines placed by their span
}

type start struct {
	t    time.Time
	used bool
}

var ginMark = []byte("[GIN] ")

var ginLine = lazy(`\[GIN\] (\d{4}/\d\d/\d\d - \d\d:\d\d:\d\d) \| +\d{3} \| +(\S+) \| +\S* \| +POST +"([^"]+)"`)

// maxStarts bounds the timestamps kept as request-start candidates.
const maxStarts = 256

// Line reads the next line of the log.
func (pl *Placer) Line(line []byte) {
	rec, ok := pl.P.Parse(line)
	if ok && !rec.Time.IsZero() {
		pl.resolve(rec.Time)
		switch {
		case rec.Kind == Stat && rec.Duration > 0 && pl.P.stampRes > 0:
			// The line says its span; its stamp (just read) says less.
			pl.chained(rec, pl.P.stampRes)
		case rec.Kind == Stat && pl.chains != nil:
			pl.unchain(rec.Key)
			fallthrough
		default:
			pl.put(Placed{rec, rec.Time})
		}
		pl.stamp(rec.Time)
		return
	}
	if ok {
		if len(pl.pending) == 0 {
			pl.prev = pl.last
		}
		pl.pending = append(pl.pending, rec)
		return
	}
	// Only an access line pays for the regexp.
	if bytes.Contains(line, ginMark) {
		if m := ginLine.FindSubmatch(line); m != nil {
			pl.gin = true
			sec, err1 := time.ParseInLocation("2006/01/02 - 15:04:05", string(m[1]), pl.P.Loc)
			dur, err2 := time.ParseDuration(string(m[2]))
			if err1 == nil && err2 == nil && isInference(string(m[3])) {
				end := pl.requestEnd(sec, dur)
				pl.ByGIN += len(pl.pending)
				for _, r := range pl.pending {
					pl.put(Placed{r, end})
				}
				pl.pending = pl.pending[:0]
			}
			return
		}
	}
	if t := pl.P.Stamp(line); !t.IsZero() {
		if !pl.gin {
			pl.resolve(t)
		}
		pl.stamp(t)
	}
}

// put hands a placed record on, or keeps it for Close.
func (pl *Placer) put(p Placed) {
	if pl.Emit != nil {
		pl.Emit(p)
		return
	}
	pl.out = append(pl.out, p)
}

func (pl *Placer) stamp(t time.Time) {
	if t.After(pl.last) {
		pl.last = t
	}
	if len(pl.starts) >= maxStarts {
		pl.starts = append(pl.starts[:0], pl.starts[maxStarts/2:]...)
	}
	pl.starts = append(pl.starts, start{t: t})
}

// requestEnd is the end of a request whose [GIN] line says it ended in
// the second sec after running dur: the start of the earliest unused
// timestamp that ends it in that second, plus dur; else mid-second.
func (pl *Placer) requestEnd(sec time.Time, dur time.Duration) time.Time {
	const slack = 5 * time.Millisecond // the handler starts before it logs
	for i := range pl.starts {
		s := &pl.starts[i]
		end := s.t.Add(dur)
		if !s.used && !end.Before(sec.Add(-slack)) && end.Before(sec.Add(time.Second+slack)) {
			s.used = true
			return end
		}
	}
	return sec.Add(time.Second / 2)
}

// isInference tells the routes that run a model from the rest.
func isInference(route string) bool {
	for _, r := range []string{"/api/generate", "/api/chat", "/v1/chat/completions", "/v1/completions", "/v1/responses"} {
		if len(route) >= len(r) && route[:len(r)] == r {
			return true
		}
	}
	return false
}

// resolve places the pending records between the previous timestamp and
// next, spread evenly in their order.
func (pl *Placer) resolve(next time.Time) {
	n := len(pl.pending)
	if n == 0 {
		return
	}
	prev := pl.prev
	if prev.IsZero() || prev.After(next) {
		prev = next
	}
	gap := next.Sub(prev)
	if gap > FarLimit {
		pl.Far += n
	}
	for i, r := range pl.pending {
		t := prev.Add(gap * time.Duration(i+1) / time.Duration(n+1))
		pl.put(Placed{r, t})
	}
	pl.pending = pl.pending[:0]
}

// Close ends the log: records still waiting have no evidence after them
// and take the last timestamp before them (Far), or none (Untimed). It
// returns every placed record in time order of the log (none with Emit).
func (pl *Placer) Close() []Placed {
	// In the order of the reporters' keys: replay's output does not
	// depend on a map's.
	keys := make([]string, 0, len(pl.chains))
	for k := range pl.chains {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pl.flushRun(pl.chains[k], Record{}, 0)
	}
	for _, r := range pl.pending {
		if pl.prev.IsZero() {
			pl.Untimed++
			continue
		}
		pl.Far++
		pl.put(Placed{r, pl.prev})
	}
	pl.pending = nil
	return pl.out
}

// chain places the lines of one reporter that say how long they cover (a
// Stat Record's Duration) but carry a stamp coarser than their spacing:
// SGLang prints "13:53:38" on five decode lines 0.175 s apart, and each
// line's time follows the one before by its own span, kept within the
// second its stamp allows. The span a line is given is then what it says,
// never the stamp's resolution (design §3).
type chain struct {
	end      time.Time // the last line's time
	anchored bool      // end is known: the lines of the first stamp are placed
	// run holds the lines of the reporter's first stamp, until a line of
	// a later stamp tells where in their second they end; res is that
	// stamp's resolution.
	run []Record
	res time.Duration
}

// maxRun bounds the lines held for one stamp.
const maxRun = 4096

// chained places r, a line with its own span and a stamp of resolution
// res.
func (pl *Placer) chained(r Record, res time.Duration) {
	if pl.chains == nil {
		pl.chains = map[string]*chain{}
	}
	c := pl.chains[r.Key]
	if c == nil {
		c = &chain{}
		pl.chains[strings.Clone(r.Key)] = c
	}
	if !c.anchored {
		if len(c.run) == 0 || r.Time.Equal(c.run[0].Time) && len(c.run) < maxRun {
			c.run, c.res = append(c.run, r), res
			return
		}
		next := r
		if r.Time.Before(c.run[0].Time) {
			next = Record{} // a stamp going back says nothing of the run
		}
		pl.flushRun(c, next, res)
	}
	lo, hi := r.Time, r.Time.Add(res)
	if hi.Before(c.end) {
		// The stamp went back past the chain: it starts again there.
		c.end = r.Time
		pl.put(Placed{r, r.Time})
		return
	}
	// Behind the stamp, the line is stretched to it: the spans said less
	// than the stamps (requests finished within the steps). Ahead of its
	// second, it is held at the end of that second.
	e := c.end.Add(r.Duration)
	if e.Before(lo) {
		e = lo
	}
	if e.After(hi) {
		e = hi
	}
	if e.Before(c.end) {
		e = c.end
	}
	c.end = e
	pl.put(Placed{r, e})
}

// unchain places the held lines of a reporter whose next line is placed
// by its own stamp.
func (pl *Placer) unchain(key string) {
	if c := pl.chains[key]; c != nil && !c.anchored {
		pl.flushRun(c, Record{}, 0)
	}
}

// flushRun places the lines held for a reporter's first stamp, all in
// the second [S, S+res) that stamp allows, each its span after the one
// before: the last one where next (the reporter's first line of a later
// stamp, of resolution nextRes; zero: none) follows it by its own span,
// as near the middle of what the stamps allow as they allow.
func (pl *Placer) flushRun(c *chain, next Record, nextRes time.Duration) {
	run := c.run
	if len(run) == 0 {
		return
	}
	s, res := run[0].Time, c.res
	var inner time.Duration
	for _, r := range run[1:] {
		inner += r.Duration
	}
	lo, hi := s.Add(inner), s.Add(res)
	if !next.Time.IsZero() {
		if b := next.Time.Add(-next.Duration); b.After(lo) {
			lo = b
		}
		if b := next.Time.Add(nextRes - next.Duration); b.Before(hi) {
			hi = b
		}
	}
	end := s.Add(res)
	switch {
	case !lo.After(hi):
		end = lo.Add(hi.Sub(lo) / 2)
	case lo.Before(end):
		end = lo
	}
	times := make([]time.Time, len(run))
	times[len(run)-1] = end
	for i := len(run) - 1; i > 0; i-- {
		t := times[i].Add(-run[i].Duration)
		if t.Before(s) {
			t = s
		}
		times[i-1] = t
	}
	for i, r := range run {
		pl.put(Placed{r, times[i]})
	}
	c.end, c.anchored, c.run = end, true, nil
}
