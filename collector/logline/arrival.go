package logline

import (
	"bytes"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// llama-server's lines that say when a request came, before its timing
// lines say when its first token was made (eval time counts from it):
//
//	srv  server_strea: conv_id= (empty=1)                       -lv 4: the HTTP handler took a completion request
//	slot get_availabl: id  3 | task -1 | selected slot by LRU, …  the server's loop picked slot 3 for the next task
//	slot launch_slot_: id  3 | task 95 | processing task, is_child = 0
//	srv  update_slots: all slots are idle
//
// A request's time to first token is then (its eval line's stamp − its eval
// time) − its arrival, timed by the log's own stamps: llama.cpp's
// --log-timestamps (microseconds, the server's clock) or, in replay, a
// relay's sub-second stamps. The HTTP handler's line names no task: the
// launches take those lines in order, which the server's queue keeps.
var (
	llamaHTTPMark   = []byte("server_strea: conv_id=")
	llamaSelectMark = []byte(" | selected slot by ")
	llamaLaunchMark = []byte(" | processing task, is_child = ")
	llamaIdleMark   = []byte("update_slots: all slots are idle")
	llamaSlotID     = []byte(": id ")
)

// clock is a line's own time: llama.cpp's elapsed stamp or a wall-clock
// stamp, in nanoseconds; kind 0: the line has none. Only clocks of one
// kind are compared.
type clock struct {
	t    int64
	kind uint8
}

const (
	clockElapsed = 1 + iota
	clockWall
)

// arrival is when a request came, as far as the log says, and when the
// server's loop took it into a slot (its "selected slot" line, else its
// launch): where it starts to count in running, as llama.cpp's own
// requests_processing counts it (a request waiting for a slot is not
// running).
type arrival struct {
	at     clock
	slot   clock
	basis  sample.TTFTBasis
	prompt time.Duration // its prompt line's eval time; -1: not read yet
}

// arrivals is what the parser keeps of requests between their arrival
// lines and their eval line.
type arrivals struct {
	http  []clock            // HTTP handler lines no launch took yet, oldest first
	sel   map[string]clock   // slot id -> its "selected slot" line
	byKey map[string]arrival // "slot N task M" -> its arrival
}

// Bounds on what arrivals keep: lines of requests that never launched or
// finished.
const (
	maxHTTPPending = 1024
	// staleHTTP: an HTTP handler line this much older than an idle
	// server's line belongs to no request still to launch (a live one is
	// the request's tokenization old).
	staleHTTP = time.Second
	// promptSlack is how far a time to first token may fall short of its
	// prompt's eval time, on stamps and printed milliseconds, before the
	// arrival is taken for another request's.
	promptSlack = time.Millisecond
)

// lineClock is the line's own time: its llama.cpp elapsed stamp, else
// (replay) its sub-second timestamp.
func (p *Parser) lineClock(line []byte) clock {
	if d, ok := elapsed(line); ok {
		return clock{int64(d), clockElapsed}
	}
	if p.Timestamps {
		if t := p.stamp(line); !t.IsZero() && p.stampRes == 0 {
			return clock{t.UnixNano(), clockWall}
		}
	}
	return clock{}
}

// llamaArrival reads a line that says when a request came; false for any
// other line.
func (p *Parser) llamaArrival(line []byte) bool {
	a := &p.arr
	switch {
	case bytes.Contains(line, llamaLaunchMark):
		i := bytes.Index(line, llamaLaunchMark)
		slot, task, ok := slotTask(line[:i])
		if !ok {
			return false
		}
		c := p.lineClock(line)
		if c.kind == 0 {
			return true
		}
		// A request for n > 1 choices launches its children (is_child =
		// 1) first, then itself: a child shares the request's HTTP line,
		// which its parent takes.
		child := bytes.HasPrefix(line[i+len(llamaLaunchMark):], []byte("1"))
		at := arrival{at: c, slot: c, basis: sample.TTFTSlot}
		if s, ok := a.sel[slot]; ok && s.kind == c.kind && s.t <= c.t {
			at.at, at.slot = s, s
		}
		if len(a.http) > 0 {
			if h := a.http[0]; h.kind == c.kind && h.t <= c.t {
				at.at, at.basis = h, sample.TTFTHTTP
			}
			if !child {
				a.http = a.http[1:]
			}
		}
		if !child {
			delete(a.sel, slot)
		}
		if a.byKey == nil || len(a.byKey) >= maxTracked {
			a.byKey = map[string]arrival{}
		}
		at.prompt = -1
		a.byKey["slot "+slot+" task "+task] = at
		return true
	case bytes.Contains(line, llamaSelectMark):
		i := bytes.Index(line, llamaSelectMark)
		slot, _, ok := slotTask(line[:i])
		if !ok {
			return false
		}
		if c := p.lineClock(line); c.kind != 0 {
			if a.sel == nil || len(a.sel) >= maxTracked {
				a.sel = map[string]clock{}
			}
			a.sel[slot] = c
		}
		return true
	case bytes.Contains(line, llamaHTTPMark):
		if c := p.lineClock(line); c.kind != 0 {
			if len(a.http) >= maxHTTPPending {
				a.http = a.http[1:]
			}
			a.http = append(a.http, c)
		}
		return true
	case bytes.Contains(line, llamaIdleMark):
		if c := p.lineClock(line); c.kind != 0 {
			n := 0
			for n < len(a.http) && a.http[n].kind == c.kind && a.http[n].t < c.t-int64(staleHTTP) {
				n++
			}
			a.http = a.http[n:]
		}
		return true
	}
	return false
}

// slotTask reads "…: id  N | task M" at the end of b.
func slotTask(b []byte) (slot, task string, ok bool) {
	i := bytes.LastIndex(b, llamaSlotID)
	if i < 0 {
		return "", "", false
	}
	rest := bytes.TrimLeft(b[i+len(llamaSlotID):], " ")
	ns := countDigits(rest, 0)
	if ns == 0 || !bytes.HasPrefix(rest[ns:], []byte(" | task ")) {
		return "", "", false
	}
	t := rest[ns+len(" | task "):]
	neg := 0
	if len(t) > 0 && t[0] == '-' {
		neg = 1
	}
	nt := countDigits(t, neg)
	if nt == neg || nt != len(t) {
		return "", "", false
	}
	return string(rest[:ns]), string(t), true
}

// llamaTTFT gives a request's prompt or eval record (read from line) what
// its arrival says: the prompt's eval time is kept, and the eval line
// gets the time from the arrival to the first token, where the line's
// stamp is of the arrival's kind and the two agree with the prompt's.
func (p *Parser) llamaTTFT(r *Record, line []byte) {
	a := &p.arr
	at, ok := a.byKey[r.Key]
	if !ok {
		return
	}
	if r.Tokens < 0 {
		at.prompt = r.Duration
		a.byKey[r.Key] = at
		return
	}
	delete(a.byKey, r.Key)
	c := p.lineClock(line)
	r.InSlot = inSlot(at, c, r.Duration)
	if c.kind != at.at.kind {
		return
	}
	ttft := time.Duration(c.t-at.at.t) - r.Duration
	if ttft < 0 || at.prompt >= 0 && ttft < at.prompt-promptSlack {
		return // not this request's arrival
	}
	r.TTFT, r.TTFTBasis = ttft, at.basis
}

// llamaProgressSlot gives a running request's progress record (read from
// line) its time in its slot so far: what its first progress line counts
// in running before the tokens it dates.
func (p *Parser) llamaProgressSlot(r *Record, line []byte) {
	if at, ok := p.arr.byKey[r.Key]; ok {
		r.InSlot = inSlot(at, p.lineClock(line), 0)
	}
}

// inSlot is the time from a request's slot to c, a line of it after
// decoding for d (and its prompt, where read), never less than that
// (stamps a relay read late in a burst can make it so); -1 where the
// stamps do not time it.
func inSlot(at arrival, c clock, d time.Duration) time.Duration {
	if c.kind == 0 || c.kind != at.slot.kind || c.t < at.slot.t {
		return -1
	}
	if at.prompt >= 0 {
		d += at.prompt
	}
	return max(time.Duration(c.t-at.slot.t), d)
}
