package logline

import (
	"bytes"
	"strconv"
	"time"

	"github.com/tpsmon/tpsmon/collector/engine"
)

var (
	vllmAvg       = []byte("Avg prompt throughput: ")
	vllmEngine    = []byte("Engine ")
	vllmAggr      = []byte(" Engines Aggregated: ")
	lmdeployMarks = []byte("Finished: ")
)

// vllmFast reads vLLM's stat line by hand: the regexp that reads it takes
// about 15 µs a line, this about 0.3 µs. matched is false when the line is
// not a vLLM stat line at all (or is LMDeploy's look-alike), so the other
// parsers get their turn; ok is false when it is one but a number in it
// is broken (counted).
func (p *Parser) vllmFast(line []byte) (r Record, ok, matched bool) {
	i := bytes.Index(line, vllmAvg)
	if i < 0 || bytes.Contains(line, lmdeployMarks) || (i > 0 && line[i-1] == ' ' && i >= 2 && line[i-2] == ']') {
		return Record{}, false, false
	}
	r = newRecord(Stat, engine.VLLM)
	// "Engine 000: " or "4 Engines Aggregated: " right before.
	head := line[:i]
	if bytes.HasSuffix(head, vllmAggr) {
		r.Aggregated = true
	} else if j := lastIndexE(head, vllmEngine); j >= 0 && bytes.HasSuffix(head, []byte(": ")) && j+len(vllmEngine) < len(head)-2 {
		id := head[j+len(vllmEngine) : len(head)-2]
		if string(id) != p.vllmID { // the same engine line after line: no new string
			p.vllmID, p.vllmKey = string(id), "engine "+string(id)
		}
		r.Key = p.vllmKey
	}
	c := cursor{b: line[i+len(vllmAvg):]}
	r.PromptTPS = c.num()
	c.lit(" tokens/s, Avg generation throughput: ")
	r.GenTPS = c.num()
	c.lit(" tokens/s, Running: ")
	r.Running = c.num()
	c.lit(" reqs, ")
	vllmQueue(&c, &r)
	if c.bad || r.GenTPS < 0 || r.PromptTPS < 0 || r.Running < 0 || r.Waiting < 0 {
		p.skip(SkipUnparsed, engine.VLLM, line)
		return Record{}, false, true
	}
	return r, true, true
}

// lastIndexE is bytes.LastIndex(b, text) for a text that starts with 'E'
// (rare in a line's head): a byte scan back, not a rolling hash.
func lastIndexE(b, text []byte) int {
	for i := len(b); ; {
		if i = bytes.LastIndexByte(b[:i], 'E'); i < 0 || bytes.HasPrefix(b[i:], text) {
			return i
		}
	}
}

// vllmQueue reads the stat line from its waiting requests on, V0's or
// V1's.
func vllmQueue(c *cursor, r *Record) {
	r.DefaultGap = 10 * time.Second
	switch {
	case c.maybe("Swapped: "):
		c.num()
		c.lit(" reqs, Pending: ")
		r.Waiting = c.num()
		c.lit(" reqs")
		// V0 averages over the time since its previous line, however
		// long (metrics.py: now - last_local_log), every 5 s or less often.
		r.DefaultGap, r.GapIsExact = 5*time.Second, true
	case c.maybe("Waiting: "):
		r.Waiting = c.num()
		c.lit(" reqs")
	default:
		c.bad = true
	}
	if c.maybe(", Preemptions: ") {
		r.Preemptions = c.num()
	}
	if c.maybe(", GPU KV cache usage: ") {
		if kv := c.num(); kv >= 0 {
			r.KV = kv / 100
		}
		c.lit("%")
	}
}

// cursor reads a line left to right; any mismatch sets bad.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) lit(s string) {
	if !c.maybe(s) {
		c.bad = true
	}
}

func (c *cursor) maybe(s string) bool {
	if c.bad || len(c.b) < len(s) || string(c.b[:len(s)]) != s {
		return false
	}
	c.b = c.b[len(s):]
	return true
}

// num reads a non-negative decimal number; -1 and bad when there is none.
func (c *cursor) num() float64 {
	n := 0
	for n < len(c.b) && (c.b[n] >= '0' && c.b[n] <= '9' || c.b[n] == '.') {
		n++
	}
	if c.bad || n == 0 {
		c.bad = true
		return -1
	}
	v, ok := decimal(c.b[:n])
	if !ok {
		var err error
		if v, err = strconv.ParseFloat(string(c.b[:n]), 64); err != nil {
			c.bad = true
			return -1
		}
	}
	c.b = c.b[n:]
	return v
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// decimal reads digits with at most one point, of at most 15 digits in
// all: their value as an integer and the power of ten to divide it by
// are both exact in a float64, so the one division rounds as
// strconv.ParseFloat does, at a tenth of its cost. ok is false for
// anything else (which ParseFloat then reads or refuses).
func decimal(b []byte) (float64, bool) {
	var m uint64
	digits, frac, dot := 0, 0, false
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			m = m*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
	}
	if digits == 0 || digits > 15 {
		return 0, false
	}
	return float64(m) / pow10[frac], true
}

// spaces skips blanks.
func (c *cursor) spaces() {
	i := 0
	for i < len(c.b) && c.b[i] == ' ' {
		i++
	}
	c.b = c.b[i:]
}
