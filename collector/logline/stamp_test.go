package logline

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"
	_ "time/tzdata" // the zones TestVLLMDateIsTimeDate reads, wherever it runs

	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/collector/tail"
)

// stampByRegexp is the timestamp reader as first written, a regexp per
// format tried on every line: the reference the scanning reader must
// agree with, line for line.
func stampByRegexp(p *Parser, s string) time.Time {
	vllmStamp := regexp.MustCompile(`(?:DEBUG|INFO|WARNING|ERROR) (\d\d-\d\d \d\d:\d\d:\d\d)`)
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

// stampLines are lines whose timestamps sit where a scan could miss them
// or find a wrong one.
var stampLines = []string{
	"(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s",
	"(APIServer pid=3646) INFO:     10.0.0.7:51234 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
	"2025-05-19T10:13:11.123456789Z (APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] x",
	"2025-05-19T10:13:11+02:00 host vllm[1]: INFO 05-19 10:13:11 x",
	"2025-05-19T10:13:11+0200 host vllm[1]: x",
	"x-1 2025-13-45T10:13:11Z then 2025-05-19 10:13:11,123 and INFO 05-19 10:13:12",
	"[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5",
	"[2026-04-08 14:05:21,123] INFO x",
	"[2026-04-08 14:05:21,12345] INFO x",
	"12-2025-05-19 10:13:11",
	"Nov 30 10:13:11 host vllm[1]: INFO 11-30 10:13:11 x",
	"Nov  3 10:13:11 host x",
	"Nox 30 10:13:11 host x",
	"WARNING 13-45 10:13:11 out of range, ERROR 05-19 10:13:12 later",
	"XINFO 05-19 10:13:11 glued",
	"INFO 02-29 10:13:11 a leap day", "INFO 02-30 10:13:11", "INFO 04-31 10:13:11", "INFO 12-31 23:59:59",
	"INFO 00-19 10:13:11", "INFO 05-00 10:13:11", "INFO 05-19 24:00:00", "INFO 05-19 23:60:00", "INFO 05-19 23:59:60",
	"INFO 03-08 02:30:00 in New York's gap", "INFO 11-01 01:30:00 twice in New York", "INFO 01-01 00:00:00",
	"INFO 05-19 10:13:1",
	"DEBUG  05-19 10:13:11 two spaces",
	"I1120 02:29:01.795279 42888 libtensorrtllm.cc:1009] {\"Active Request Count\":1}",
	"W1120 02:29:01 no fraction",
	"5.27.453.097 I slot print_timing: id  0 | task 160 |",
	"[10:13:11] time of day only",
	"[10:13:11 TP0] time of day only",
	"-----",
	"",
	"-",
	"2025-05-19",
	"2025-05-19T",
	"2025-05-19T10:13:11.1Z one digit", "2025-05-19T10:13:11.123456789012Z twelve digits",
	"2025-05-19T10:13:11.123456789012+05:30 twelve digits, an offset", "2025-05-19T10:13:11.5-0800 x",
	"2025-05-19T10:13:11.5-08:0 a short offset", "2025-05-19T10:13:11.5+08 a shorter one", "2025-05-19T10:13:11. a point alone",
	"2025-05-19T10:13:11.25", "2025-05-19T10:13:11.250000001+00:00", "2025-05-19T10:13:1 short then 2025-05-19T10:13:12Z",
	"2025-05-19T25:13:11.5Z out of range", "2025-05-19T10:13:11.999999999Z then 2025-05-19T10:13:11.000000001Z",
	"2025-05-19T10:13:11.000000001Z", "2025-03-30T02:30:00.5 in a gap where zones have one",
	// One second in a row, its zone and fraction changing.
	"2025-05-19T10:13:11.5+05:30 x", "2025-05-19T10:13:11.5Z", "2025-05-19T10:13:11.7", "2025-05-19T10:13:11.7+0530",
	"2025-05-19T10:13:11+05:30", "2025-05-19T10:13:11.25+05:30", "2025-05-19T10:13:11.25+05:3", "2025-05-19T10:13:11.", "2025-05-19T10:13:11Zx",
}

func TestStampAgreesWithRegexps(t *testing.T) {
	lines := append([]string(nil), stampLines...)
	files, _ := filepath.Glob("testdata/*.log")
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		fh.Close()
	}
	loc, _ := time.LoadLocation("America/New_York")
	for _, tc := range []struct {
		name string
		p    func() *Parser
	}{
		{"utc", func() *Parser { p, _ := NewParser("auto"); p.Year = 2026; return p }},
		{"new-york-this-year", func() *Parser { p, _ := NewParser("auto"); p.Loc = loc; return p }},
		{"started", func() *Parser {
			p, _ := NewParser("auto")
			p.StartedAt = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
			return p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fast, ref := tc.p(), tc.p()
			for _, l := range lines {
				// Each line twice: the second read comes from the cache.
				for range 2 {
					got, want := fast.Stamp([]byte(l)), stampByRegexp(ref, l)
					if !got.Equal(want) || got.Location().String() != want.Location().String() {
						t.Fatalf("line %q: stamp %v, the regexps say %v", l, got, want)
					}
					if !want.IsZero() && want.After(ref.lastDate) {
						ref.lastDate = want
					}
				}
			}
			if len(lines) < 200 {
				t.Fatalf("only %d lines compared", len(lines))
			}
		})
	}
}

func FuzzStamp(f *testing.F) {
	for _, l := range stampLines {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, l string) {
		fast, ref := &Parser{Loc: time.UTC, Year: 2026, maxLine: tail.MaxLine}, &Parser{Loc: time.UTC, Year: 2026, maxLine: tail.MaxLine}
		for range 2 {
			if got, want := fast.stamp([]byte(l)), stampByRegexp(ref, l); !got.Equal(want) {
				t.Fatalf("line %q: stamp %v, the regexps say %v", l, got, want)
			}
		}
	})
}

// llamaSlot is the regexp slotKey replaced.
var llamaSlot = regexp.MustCompile(`slot print_timing: id +(\d+) \| task (-?\d+) \|`)

func TestSlotKeyAgreesWithRegexp(t *testing.T) {
	p, _ := NewParser("llamacpp")
	for _, l := range []string{
		"slot print_timing: id  0 | task 160 |        eval time =    5729.20 ms",
		"slot print_timing: id 12 | task -1 |",
		"slot print_timing: id  3 | task 160 |",
		"slot print_timing: id  3 | task 161 | and again slot print_timing: id  4 | task 9 |",
		"slot print_timing: id0 | task 1 | then slot print_timing: id 7 | task 2 |",
		"slot print_timing: id  | task 1 |",
		"slot print_timing: id  1 | task - |",
		"slot print_timing: id  1 | task 5|",
		"slot print_timing: id  1 | task 5",
		"slot print_timing: id",
	} {
		got, ok := p.slotKey([]byte(l))
		want := ""
		if m := llamaSlot.FindStringSubmatch(l); m != nil {
			want = "slot " + m[1] + " task " + m[2]
		}
		if ok != (want != "") || got != want {
			t.Errorf("line %q: key %q (%v), the regexp says %q", l, got, ok, want)
		}
	}
}

// TestNeedlesPassOverNothing reads every fixture log with each engine's
// parser twice: as built, and with the needle scan letting every line
// through to the parsers. Records, counters and identity must agree.
func TestNeedlesPassOverNothing(t *testing.T) {
	lines := fixtureLines(t)
	for _, l := range stampLines {
		lines = append(lines, []byte(l))
	}
	for _, engine := range append([]string{engine.Auto}, engine.Names()...) {
		fast, _ := NewParser(engine)
		slow, _ := NewParser(engine)
		fast.Timestamps, slow.Timestamps, fast.Year, slow.Year = true, true, 2026, 2026
		slow.needles = nil // every line reaches the parsers
		matched := 0
		for _, l := range lines {
			rf, okf := fast.Parse(l)
			rs, oks := slow.Parse(l)
			if okf != oks || !reflect.DeepEqual(rf, rs) {
				t.Fatalf("%s: line %q: %+v %v, without the scan %+v %v", engine, l, rf, okf, rs, oks)
			}
			if okf {
				matched++
			}
		}
		if fast.Skipped != slow.Skipped || fast.Cancelled != slow.Cancelled || fast.Identity() != slow.Identity() || fast.llamaKey != slow.llamaKey {
			t.Errorf("%s: counters or identity differ: %+v vs %+v", engine, fast, slow)
		}
		if engine == "auto" && matched < 50 {
			t.Errorf("auto: only %d lines matched: the comparison saw too little", matched)
		}
	}
}

// TestVLLMDateIsTimeDate reads a vLLM stamp at several times of every day
// of a year, in zones with and without daylight saving (at 2:00, at
// midnight, by half an hour), and wants exactly what time.Date says: the
// day-start shortcut must not move a time, nor change its zone.
func TestVLLMDateIsTimeDate(t *testing.T) {
	zones := []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Havana",
		"America/Santiago", "Asia/Kolkata"}
	locs := []*time.Location{time.FixedZone("X", -7*3600-1800)}
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		locs = append(locs, loc)
	}
	clocks := [][3]int{{0, 0, 0}, {0, 30, 0}, {1, 0, 0}, {1, 59, 59}, {2, 0, 0}, {2, 30, 0}, {3, 0, 1}, {12, 0, 0}, {23, 59, 59}}
	plain := 0
	for _, loc := range locs {
		p := &Parser{Loc: loc, Year: 2026}
		for day := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC); day.Year() == 2026; day = day.AddDate(0, 0, 1) {
			for _, c := range clocks {
				stamp := fmt.Sprintf("%02d-%02d %02d:%02d:%02d", int(day.Month()), day.Day(), c[0], c[1], c[2])
				got, ok := p.vllmDate([]byte(stamp))
				want := time.Date(2026, day.Month(), day.Day(), c[0], c[1], c[2], 0, loc)
				if !ok || got != want {
					t.Fatalf("%s in %v: %v (%v), want %v", stamp, loc, got, ok, want)
				}
			}
			if p.day.plain {
				plain++
			}
		}
	}
	if plain == 0 || plain == 365*len(locs) {
		t.Errorf("%d of %d days plain: the shortcut or the fallback went untested", plain, 365*len(locs))
	}
}
