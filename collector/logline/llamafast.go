package logline

import (
	"bytes"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/collector/engine"
)

// llamaFast reads a llama-server timing line by hand when only a stamp
// comes before it and only blanks after it: the one-line form
// ("slot print_timing: id  0 | task 7 | prompt eval time = ...") and the
// figures under a multi-line header ("eval time = ..."). Before its
// text such a line has no lowercase letter, and every needle of every
// format has one, so the general path would hand it to llamacpp alone,
// which reads it as this does: here without the needle, cancel, JSON and
// progress scans. matched is false for any other line, which the general
// path reads; ok is false for figures before any header, which it
// drops.
func (p *Parser) llamaFast(line []byte) (r Record, ok, matched bool) {
	rest := line[textStart(line):]
	key := p.llamaKey
	if bytes.HasPrefix(rest, slotMark) {
		k, n, whole := p.slotAt(rest[len(slotMark):])
		if !whole {
			return Record{}, false, false
		}
		key, rest = k, rest[len(slotMark)+n:]
	}
	c := cursor{b: rest}
	c.spaces()
	if !bytes.HasPrefix(c.b, []byte("prompt eval time =")) && !bytes.HasPrefix(c.b, []byte("eval time =")) {
		return Record{}, false, false
	}
	prompt, ms, tokens, perSec := c.llamaEval()
	if c.bad || len(bytes.TrimRight(c.b, " \t\r\n")) > 0 {
		return Record{}, false, false // not the whole line: the general path's
	}
	if key == "" {
		return Record{}, false, true
	}
	return llamaRequest(key, prompt, ms, tokens, perSec), true, true
}

// textStart is where a line's text starts: its first lowercase ASCII
// letter (len(line) if none), what comes before being a stamp, a level
// or blanks.
func textStart(line []byte) int {
	for i, c := range line {
		if c >= 'a' && c <= 'z' {
			return i
		}
	}
	return len(line)
}

// llamaRequest is the record of one request's timing line.
func llamaRequest(key string, prompt bool, ms, tokens, perSec float64) Record {
	r := newRecord(Request, engine.LlamaCpp)
	r.Key = key
	r.Duration = time.Duration(ms * float64(time.Millisecond))
	if prompt {
		r.PromptTokens = tokens
	} else {
		r.Tokens, r.UserTPS = tokens, perSec
		r.TPOT = decodeGap(r.Duration, tokens)
	}
	return r
}

// decodeGap is a request's time per output token: its eval time is from
// its first token to its last, tokens-1 gaps (unknown below two tokens).
func decodeGap(eval time.Duration, tokens float64) time.Duration {
	if tokens < 2 || eval <= 0 {
		return -1
	}
	return time.Duration(float64(eval) / (tokens - 1))
}

// llamaEvalFast reads "[prompt ]eval time = X ms / N tokens (Y ms per
// token, Z tokens per second)" from where b starts: the figures of a
// llama.cpp request, without the regexp (about 2 µs a line).
func llamaEvalFast(b []byte) (prompt bool, ms, tokens, perSec float64, ok bool) {
	c := cursor{b: b}
	prompt, ms, tokens, perSec = c.llamaEval()
	return prompt, ms, tokens, perSec, !c.bad
}

// llamaEval is llamaEvalFast on a cursor, which it leaves after the
// figures.
func (c *cursor) llamaEval() (prompt bool, ms, tokens, perSec float64) {
	prompt = c.maybe("prompt ")
	c.lit("eval time =")
	c.spaces()
	ms = c.num()
	c.lit(" ms /")
	c.spaces()
	tokens = c.num()
	if !c.maybe(" tokens") {
		c.lit(" runs")
	}
	c.spaces()
	c.lit("(")
	c.spaces()
	c.num()
	c.lit(" ms per token,")
	c.spaces()
	perSec = c.num()
	c.lit(" tokens per second)")
	return prompt, ms, tokens, perSec
}

var slotMark = []byte("slot print_timing: id")

// slotKey reads "slot print_timing: id +N | task M |" at the first place
// in b it is whole (b starts at the first "slot print_timing: id"), as
// the key "slot N task M". The key of the line before is kept: the
// lines of one request share it.
func (p *Parser) slotKey(b []byte) (string, bool) {
	for {
		i := bytes.Index(b, slotMark)
		if i < 0 {
			return "", false
		}
		b = b[i+len(slotMark):]
		if key, _, ok := p.slotAt(b); ok {
			return key, true
		}
	}
}

// slotAt reads " +N | task M |" from where b starts (right after
// slotMark), as slotKey's key, and how many bytes it took.
func (p *Parser) slotAt(b []byte) (key string, n int, ok bool) {
	if len(b) == 0 || b[0] != ' ' {
		return "", 0, false
	}
	c := cursor{b: b}
	c.spaces()
	rest := c.b // from the slot's digits on
	ns := countDigits(rest, 0)
	if ns == 0 || !bytes.HasPrefix(rest[ns:], []byte(" | task ")) {
		return "", 0, false
	}
	task := rest[ns+len(" | task "):]
	neg := 0
	if len(task) > 0 && task[0] == '-' {
		neg = 1
	}
	nt := countDigits(task, neg)
	if nt == neg || !bytes.HasPrefix(task[nt:], []byte(" |")) {
		return "", 0, false
	}
	if text := rest[:ns+len(" | task ")+nt]; !bytes.Equal(text, p.slotText) {
		p.slotText = append(p.slotText[:0], text...)
		p.slotKeyS = p.keys.make(rest[:ns], task[:nt])
	}
	return p.slotKeyS, len(b) - len(task) + nt + len(" |"), true
}

// countDigits counts the digits of b from i on, plus i.
func countDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// keyArena makes the keys "slot N task M" of a busy llama-server log, a
// new one each line, in shared blocks: a string each cost more than
// reading the line's figures (bench/HISTORY.md, issue 16, round 6). A
// strings.Builder never writes over what its String returned, so a key
// stays valid when its block is left for a new one; a key kept for long
// pins its block, so Stream copies the keys of progress lines, the only
// ones from here it keeps.
type keyArena struct {
	b       *strings.Builder
	scratch []byte // a key, put together before its one write
}

// keyBlock is the size of a block: a few hundred keys.
const keyBlock = 4 << 10

func (a *keyArena) make(slot, task []byte) string {
	n := len("slot ") + len(slot) + len(" task ") + len(task)
	if a.b == nil || a.b.Cap()-a.b.Len() < n {
		a.b = new(strings.Builder)
		a.b.Grow(max(keyBlock, n))
	}
	a.scratch = append(append(append(append(a.scratch[:0], "slot "...), slot...), " task "...), task...)
	start := a.b.Len()
	a.b.Write(a.scratch)
	return a.b.String()[start:]
}
