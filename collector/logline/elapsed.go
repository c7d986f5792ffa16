package logline

import (
	"time"
)

// elapsed reads llama.cpp's --log-timestamps prefix, the time since the
// process started as minutes.seconds.milliseconds.microseconds
// ("0.36.157.459 I srv ..."), at the start of line or after a prefix a
// relay or container added (up to the first such field).
func elapsed(line []byte) (time.Duration, bool) {
	for start := 0; start < len(line) && start < 64; start++ {
		if start > 0 && line[start-1] != ' ' {
			continue
		}
		if d, ok := elapsedAt(line[start:]); ok {
			return d, true
		}
	}
	return 0, false
}

func elapsedAt(b []byte) (time.Duration, bool) {
	i := 0
	digits := func(min, max int) (int64, bool) {
		var v int64
		n := 0
		for i < len(b) && n < max && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + int64(b[i]-'0')
			i++
			n++
		}
		return v, n >= min
	}
	dot := func() bool {
		if i < len(b) && b[i] == '.' {
			i++
			return true
		}
		return false
	}
	m, ok := digits(1, 6)
	if !ok || !dot() {
		return 0, false
	}
	s, ok := digits(2, 2)
	if !ok || !dot() || s > 59 {
		return 0, false
	}
	ms, ok := digits(3, 3)
	if !ok || !dot() {
		return 0, false
	}
	us, ok := digits(3, 3)
	if !ok || i >= len(b) || b[i] != ' ' {
		return 0, false
	}
	return time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(ms)*time.Millisecond +
		time.Duration(us)*time.Microsecond, true
}

// LiveTime is when a line read live at read was written: for a line with
// llama.cpp's elapsed-time stamp, the process start plus the stamp. The
// start is read - elapsed at its earliest over the lines seen (a line is
// read after it was written, never before), and taken afresh when the
// stamps go back (the server restarted). Other lines were written when
// read.
func (p *Parser) LiveTime(line []byte, read time.Time) time.Time {
	if len(line) == 0 || line[0] < '0' || line[0] > '9' {
		if len(line) == 0 || !p.relStamps {
			return read
		}
	}
	d, ok := elapsed(line)
	if !ok {
		return read
	}
	p.relStamps = true
	start := read.Add(-d)
	if p.anchor.IsZero() || d+time.Second < p.lastElapsed || start.Before(p.anchor) {
		p.anchor = start
	}
	p.lastElapsed = d
	return p.anchor.Add(d)
}
