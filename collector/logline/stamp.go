package logline

import (
	"regexp"
	"time"
)

// Timestamps, most precise first: an RFC3339 prefix added by docker -t,
// journalctl -o short-iso or TGI itself; then the engines' own.
var (
	rfc3339     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?`)
	isoSpace    = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?`)
	vllmStamp   = regexp.MustCompile(`(?:DEBUG|INFO|WARNING|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)`)
	syslogStamp = regexp.MustCompile(`^(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]\d \d\d:\d\d:\d\d`)
	glogStamp   = regexp.MustCompile(`^[IWEF](\d{4} \d\d:\d\d:\d\d\.\d+) `)
	timeOfDay   = regexp.MustCompile(`^\[(\d\d:\d\d:\d\d)[ \]]`)
	pyLogComma  = regexp.MustCompile(`,(\d{3})$`)
)

// Stamp returns the most precise timestamp on a line that carries no
// throughput (it places the untimed lines after it), or zero.
func (p *Parser) Stamp(line []byte) time.Time {
	if len(line) > p.maxLine {
		line = line[:p.maxLine]
	}
	t := p.stamp(string(line))
	if !t.IsZero() && t.After(p.lastDate) {
		p.lastDate = t
	}
	return t
}

// stamp returns the most precise timestamp on the line, or zero.
func (p *Parser) stamp(s string) time.Time {
	year := p.Year
	if year == 0 {
		year = time.Now().In(p.Loc).Year()
	}
	if m := rfc3339.FindString(s); m != "" {
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05.999999999Z0700"} {
			if t, err := time.ParseInLocation(layout, m, p.Loc); err == nil {
				return t
			}
		}
	}
	if m := isoSpace.FindString(s); m != "" {
		m = pyLogComma.ReplaceAllString(m, ".$1")
		if t, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", m, p.Loc); err == nil {
			return t
		}
	}
	if m := syslogStamp.FindString(s); m != "" {
		if t, err := time.ParseInLocation("Jan _2 15:04:05", m, p.Loc); err == nil {
			return t.AddDate(year, 0, 0)
		}
	}
	if m := vllmStamp.FindStringSubmatch(s); m != nil {
		if t, err := time.ParseInLocation("01-02 15:04:05", m[1], p.Loc); err == nil {
			return t.AddDate(year, 0, 0)
		}
	}
	if m := glogStamp.FindStringSubmatch(s); m != nil {
		if t, err := time.ParseInLocation("0102 15:04:05.999999", m[1], p.Loc); err == nil {
			return t.AddDate(year, 0, 0)
		}
	}
	if d, ok := elapsed([]byte(s)); ok {
		if p.StartedAt.IsZero() {
			p.Relative++
			return time.Time{}
		}
		return p.StartedAt.Add(d)
	}
	if m := timeOfDay.FindStringSubmatch(s); m != nil && !p.lastDate.IsZero() {
		if t, err := time.ParseInLocation("15:04:05", m[1], p.Loc); err == nil {
			d := p.lastDate.In(p.Loc)
			return time.Date(d.Year(), d.Month(), d.Day(), t.Hour(), t.Minute(), t.Second(), 0, p.Loc)
		}
	}
	return time.Time{}
}
