package logline

import (
	"bytes"
	"time"
)

// Timestamps, most precise first: an RFC3339 prefix added by docker -t,
// journalctl -o short-iso or TGI itself; then the engines' own.
var (
	rfc3339     = lazy(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?`)
	isoSpace    = lazy(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?`)
	syslogStamp = lazy(`^(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d`)
	glogStamp   = lazy(`^[IWEF](\d{4} \d\d:\d\d:\d\d\.\d+) `)
	timeOfDay   = lazy(`^\[(\d\d:\d\d:\d\d)[ \]]`)
	pyLogComma  = lazy(`,(\d{3})$`)
)

// Stamp returns the most precise timestamp on a line that carries no
// throughput (it places the untimed lines after it), or zero.
func (p *Parser) Stamp(line []byte) time.Time {
	if len(line) > p.maxLine {
		line = line[:p.maxLine]
	}
	t := p.stamp(line)
	if !t.IsZero() && t.After(p.lastDate) {
		p.lastDate = t
	}
	return t
}

// stampKind names the format a cached timestamp was read in.
type stampKind uint8

const (
	kindRFC3339 stampKind = iota + 1
	kindISOSpace
	kindSyslog
	kindVLLM
	kindGlog
)

// stampCache keeps the last timestamp text read and what it said: a busy
// log prints hundreds of lines with the same second's stamp, and reading
// it again is a comparison of a few bytes instead of a parse.
type stampCache struct {
	kind stampKind
	text []byte
	loc  *time.Location
	year int
	t    time.Time
	ok   bool
}

// stamp returns the most precise timestamp on the line, or zero. Each
// format is looked for only where a cheap scan finds its shape, so a line
// without a timestamp costs a few byte scans.
func (p *Parser) stamp(b []byte) time.Time {
	// Only the stamps without a fraction say which second and no more.
	p.stampRes = 0
	if t, ok := p.stampISO(b); ok {
		return t
	}
	if t, ok := p.stampSyslog(b); ok {
		p.stampRes = time.Second
		return t
	}
	if t, ok := p.stampVLLM(b); ok {
		p.stampRes = time.Second
		return t
	}
	if t, ok := p.stampGlog(b); ok {
		return t
	}
	if d, ok := elapsed(b); ok {
		if p.StartedAt.IsZero() {
			p.Relative++
			return time.Time{}
		}
		return p.StartedAt.Add(d)
	}
	return p.stampTimeOfDay(b)
}

// stampISO reads an RFC3339 or ISO date and time ("2026-05-19T10:13:11Z",
// "2026-05-19 10:13:11,123").
func (p *Parser) stampISO(b []byte) (time.Time, bool) {
	c := isoDateAt(b)
	if c < 0 {
		return time.Time{}, false
	}
	if t, ok := p.sameSecond(b[c:]); ok {
		return t, true
	}
	// Both patterns start with the date: no match starts before it.
	if n, fs, fe := rfc3339At(b[c:]); n > 0 {
		// The stamp without its fraction is cached: lines within one
		// second share it however fine their fractions (docker -t's are
		// nanoseconds). A second holds no zone change, so the fraction
		// is added after.
		m := b[c : c+n]
		p.isoBuf = append(append(p.isoBuf[:0], m[:fs]...), m[fe:]...)
		if t, ok := p.cached(kindRFC3339, p.isoBuf, p.parseRFC3339); ok {
			if fs == fe {
				p.stampRes = time.Second
			}
			return t.Add(fraction(m[fs:fe])), true
		}
	} else if m := rfc3339.Find(b[c:]); m != nil {
		if t, ok := p.cached(kindRFC3339, m, p.parseRFC3339); ok {
			if bytes.IndexByte(m, '.') < 0 {
				p.stampRes = time.Second
			}
			return t, true
		}
	}
	if m := isoSpace.Find(b[c:]); m != nil {
		if t, ok := p.cached(kindISOSpace, m, p.parseISOSpace); ok {
			if len(m) == len("2006-01-02 15:04:05") {
				p.stampRes = time.Second
			}
			return t, true
		}
	}
	return time.Time{}, false
}

// sameSecond is stampISO's answer for a stamp in the second of the one
// before it (a busy log's lines share their second, by fifty in the S2
// llama.cpp log): the cached stamp, its seconds and zone compared as
// bytes, so the shape needs no check. ok is false for any other.
func (p *Parser) sameSecond(b []byte) (time.Time, bool) {
	const secs = len("dddd-dd-ddTdd:dd:dd")
	c := &p.stamps
	if c.kind != kindRFC3339 || !c.ok || c.loc != p.Loc || c.year != p.Year || len(c.text) < secs || len(b) < secs ||
		string(b[:secs]) != string(c.text[:secs]) {
		return time.Time{}, false
	}
	fe := fractionEnd(b, secs)
	zone := c.text[secs:]
	if zoneLen(b[fe:]) != len(zone) || string(b[fe:fe+len(zone)]) != string(zone) {
		return time.Time{}, false
	}
	if fe == secs {
		p.stampRes = time.Second
	}
	return c.t.Add(fraction(b[secs:fe])), true
}

// rfc3339At matches the rfc3339 regexp at the start of b, by hand: n is
// the match's length (0: none here, the regexp may still match further
// on), [fs, fe) its fraction with the point (empty when it has none).
func rfc3339At(b []byte) (n, fs, fe int) {
	const shape = "dddd-dd-ddTdd:dd:dd"
	if !hasShape(b, shape) {
		return 0, 0, 0
	}
	fs = len(shape)
	fe = fractionEnd(b, fs)
	return fe + zoneLen(b[fe:]), fs, fe
}

// hasShape tells whether b starts as shape does, 'd' standing for a digit.
func hasShape(b []byte, shape string) bool {
	if len(b) < len(shape) {
		return false
	}
	for i := range len(shape) {
		if shape[i] == 'd' && !isDigit(b[i]) || shape[i] != 'd' && b[i] != shape[i] {
			return false
		}
	}
	return true
}

// fractionEnd returns where a fraction (".123") starting at i ends; i when
// none starts there.
func fractionEnd(b []byte, i int) int {
	if i+1 >= len(b) || b[i] != '.' || !isDigit(b[i+1]) {
		return i
	}
	e := i + 2
	for e < len(b) && isDigit(b[e]) {
		e++
	}
	return e
}

// zoneLen is the length of the zone ("Z", "+07:00", "+0700") z starts
// with; 0 for none.
func zoneLen(z []byte) int {
	switch {
	case len(z) > 0 && z[0] == 'Z':
		return 1
	case len(z) >= 5 && (z[0] == '+' || z[0] == '-') && isDigit(z[1]) && isDigit(z[2]):
		if m := z[3:]; m[0] == ':' && len(m) >= 3 && isDigit(m[1]) && isDigit(m[2]) {
			return 6
		} else if isDigit(m[0]) && isDigit(m[1]) {
			return 5
		}
	}
	return 0
}

// fraction is the time a fraction of a second (".123") says, its digits
// past the ninth cut as time.Parse cuts them.
func fraction(f []byte) time.Duration {
	if len(f) < 2 {
		return 0
	}
	var ns time.Duration
	digits := f[1:min(len(f), 10)]
	for _, c := range digits {
		ns = ns*10 + time.Duration(c-'0')
	}
	for range 9 - len(digits) {
		ns *= 10
	}
	return ns
}

func (p *Parser) parseRFC3339(b []byte) (time.Time, bool) {
	s := string(b)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05.999999999Z0700"} {
		if t, err := time.ParseInLocation(layout, s, p.Loc); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func (p *Parser) parseISOSpace(b []byte) (time.Time, bool) {
	s := pyLogComma.ReplaceAllString(string(b), ".$1")
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", s, p.Loc)
	return t, err == nil
}

// stampSyslog reads syslog's "Jan _2 15:04:05" at the line's start.
func (p *Parser) stampSyslog(b []byte) (time.Time, bool) {
	if len(b) == 0 || bytes.IndexByte([]byte("JFMASOND"), b[0]) < 0 {
		return time.Time{}, false
	}
	m := syslogStamp.Find(b)
	if m == nil {
		return time.Time{}, false
	}
	return p.cached(kindSyslog, m, func(b []byte) (time.Time, bool) {
		t, err := time.ParseInLocation("Jan _2 15:04:05", string(b), p.Loc)
		return t.AddDate(p.year(), 0, 0), err == nil
	})
}

// stampVLLM reads vLLM's "INFO 05-19 10:13:11".
func (p *Parser) stampVLLM(b []byte) (time.Time, bool) {
	m := vllmStampIn(b)
	if m == nil {
		return time.Time{}, false
	}
	return p.cached(kindVLLM, m, p.vllmDate)
}

// vllmDate is the time of a "MM-DD hh:mm:ss" whose digits vllmStampIn
// checked, in the year of year(): what time.ParseInLocation("01-02
// 15:04:05") and AddDate(year) give (a new second each line made them a
// quarter of a vLLM stat line's cost), with the same ranges refused. Like
// them, February 29th is read in the leap year 0 and so becomes March 1st
// in a common year.
func (p *Parser) vllmDate(m []byte) (time.Time, bool) {
	num := func(i int) int { return int(m[i]-'0')*10 + int(m[i+1]-'0') }
	month, day, hour, minute, sec := num(0), num(3), num(6), num(9), num(12)
	if month < 1 || month > 12 || day < 1 || day > daysIn0[month-1] || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	y := p.year()
	d := &p.day
	if !d.set || d.year != y || d.month != month || d.day != day || d.loc != p.Loc {
		*d = newDayStart(y, month, day, p.Loc)
	}
	if !d.plain {
		return time.Date(y, time.Month(month), day, hour, minute, sec, 0, p.Loc), true
	}
	return d.t.Add(time.Duration(hour*3600+minute*60+sec) * time.Second), true
}

// dayStart is the start of the day a vLLM stamp was last read on: a stat
// line is a new second each time, and a second's offset from its day's
// start is what time.Date would say, unless the zone changes that day.
type dayStart struct {
	set              bool
	year, month, day int
	loc              *time.Location
	t                time.Time
	plain            bool // the day is 24 hours in one zone offset
}

func newDayStart(year, month, day int, loc *time.Location) dayStart {
	t := time.Date(year, time.Month(month), day, 0, 0, 0, 0, loc)
	next := time.Date(year, time.Month(month), day+1, 0, 0, 0, 0, loc)
	_, end := t.ZoneBounds()
	h, m, s := t.Clock()
	plain := h == 0 && m == 0 && s == 0 && next.Sub(t) == 24*time.Hour && (end.IsZero() || !end.Before(next))
	return dayStart{set: true, year: year, month: month, day: day, loc: loc, t: t, plain: plain}
}

// daysIn0 are the months' lengths in year 0, a leap year, in which
// time.Parse checks a date that has no year.
var daysIn0 = [12]int{31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// stampGlog reads glog's "I1120 02:29:01.795279 " at the line's start.
func (p *Parser) stampGlog(b []byte) (time.Time, bool) {
	if len(b) <= 1 || (b[0] != 'I' && b[0] != 'W' && b[0] != 'E' && b[0] != 'F') || !isDigit(b[1]) {
		return time.Time{}, false
	}
	m := glogStamp.FindSubmatch(b)
	if m == nil {
		return time.Time{}, false
	}
	return p.cached(kindGlog, m[1], func(b []byte) (time.Time, bool) {
		t, err := time.ParseInLocation("0102 15:04:05.999999", string(b), p.Loc)
		return t.AddDate(p.year(), 0, 0), err == nil
	})
}

// stampTimeOfDay reads "[10:13:11]" at the line's start, on the date of
// the last full date seen.
func (p *Parser) stampTimeOfDay(b []byte) time.Time {
	if len(b) == 0 || b[0] != '[' || p.lastDate.IsZero() {
		return time.Time{}
	}
	m := timeOfDay.FindSubmatch(b)
	if m == nil {
		return time.Time{}
	}
	t, err := time.ParseInLocation("15:04:05", string(m[1]), p.Loc)
	if err != nil {
		return time.Time{}
	}
	d := p.lastDate.In(p.Loc)
	p.stampRes = time.Second
	return time.Date(d.Year(), d.Month(), d.Day(), t.Hour(), t.Minute(), t.Second(), 0, p.Loc)
}

// year is the year of timestamps that print none.
func (p *Parser) year() int {
	if p.Year != 0 {
		return p.Year
	}
	return time.Now().In(p.Loc).Year()
}

// cached returns what parse says of text, from the cache when the same
// text in the same format was read last.
func (p *Parser) cached(kind stampKind, text []byte, parse func([]byte) (time.Time, bool)) (time.Time, bool) {
	c := &p.stamps
	if c.kind == kind && c.loc == p.Loc && c.year == p.Year && bytes.Equal(c.text, text) {
		return c.t, c.ok
	}
	t, ok := parse(text)
	c.kind, c.text, c.loc, c.year, c.t, c.ok = kind, append(c.text[:0], text...), p.Loc, p.Year, t, ok
	return t, ok
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digits(b []byte) bool {
	for _, c := range b {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// isoDateAt returns where the first YYYY-MM-DD (digits only) starts in
// b, or -1.
func isoDateAt(b []byte) int {
	for off := 0; ; {
		i := bytes.IndexByte(b[off:], '-')
		if i < 0 {
			return -1
		}
		i += off
		off = i + 1
		if i >= 4 && i+6 <= len(b) && digits(b[i-4:i]) && digits(b[i+1:i+3]) && b[i+3] == '-' && digits(b[i+4:i+6]) {
			return i - 4
		}
	}
}

var logLevels = [][]byte{[]byte("DEBUG"), []byte("INFO"), []byte("WARNING"), []byte("ERROR")}

// vllmStampIn returns the MM-DD hh:mm:ss after the first "LEVEL " of
// vLLM's logging format in b, or nil.
func vllmStampIn(b []byte) []byte {
	for off := 0; ; {
		i := bytes.IndexByte(b[off:], '-')
		if i < 0 {
			return nil
		}
		i += off
		off = i + 1
		// LEVEL MM-DD hh:mm:ss, the dash at i.
		if i < 7 || i+12 > len(b) || b[i-3] != ' ' {
			continue
		}
		s := b[i-2 : i+12]
		if !digits(s[0:2]) || !digits(s[3:5]) || s[5] != ' ' || !digits(s[6:8]) || s[8] != ':' ||
			!digits(s[9:11]) || s[11] != ':' || !digits(s[12:14]) {
			continue
		}
		for _, l := range logLevels {
			if bytes.HasSuffix(b[:i-3], l) {
				return s
			}
		}
	}
}
