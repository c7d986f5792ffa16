package logline

import (
	"bytes"
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
		pl.put(Placed{rec, rec.Time})
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
