package logline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// TestStreamRefusesImpossibleLines: a vLLM line printing a rate no server
// reaches is refused and counted; the lines around it read as before.
func TestStreamRefusesImpossibleLines(t *testing.T) {
	line := func(rate string) string {
		return "INFO 05-19 10:13:11 [loggers.py:271] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: " +
			rate + " tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%"
	}
	tests := []struct {
		rate   string
		reason sample.Reason
	}{
		{"99999999999999999999.0", sample.Huge},
		{"1" + strings.Repeat("0", 300) + ".0", sample.Huge},
		{"20000000.0", sample.Huge}, // 2e7 tokens/s: twice the bound
	}
	for _, tc := range tests {
		t.Run(tc.rate, func(t *testing.T) {
			p, err := NewParser("vllm")
			if err != nil {
				t.Fatal(err)
			}
			var got []sample.Discard
			st := &Stream{Discarded: func(d sample.Discard) { got = append(got, d) }}
			t0 := time.Unix(1_700_000_000, 0)
			var tokens []float64
			for i, l := range []string{line("100.0"), line(tc.rate), line("100.0")} {
				rec, ok := p.Parse([]byte(l))
				if !ok {
					t.Fatalf("line %d not parsed", i)
				}
				if iv, ok := st.Interval(rec, t0.Add(time.Duration(i)*10*time.Second)); ok {
					tokens = append(tokens, iv.Tokens)
				}
			}
			if len(tokens) != 2 || tokens[0] != 1000 || tokens[1] != 1000 {
				t.Errorf("tokens %v, want [1000 1000]", tokens)
			}
			if len(got) != 1 || got[0].Reason != tc.reason || got[0].Series != "tokens" {
				t.Errorf("discards %v, want one %v of tokens", got, tc.reason)
			}
		})
	}
}

// TestStreamRefusesImpossibleSpans: a llama.cpp request that says it ran
// for more than a day is a misprinted duration, and one stamped in a year
// line protocol cannot hold a misprinted time: each is refused and counted.
// A day is taken, as are the years up to 2262.
func TestStreamRefusesImpossibleSpans(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	refused := func(r sample.Reason) []sample.Discard {
		return []sample.Discard{{Series: "interval", Reason: r}}
	}
	tests := []struct {
		name string
		ms   string
		at   time.Time
		want []sample.Discard // nil: taken
	}{
		{"5.7 s", "5729.20", now, nil},
		{"a day", "86400000.00", now, nil},
		{"a day and a millisecond", "86400001.00", now, refused(sample.Huge)},
		{"three years", "99999999999.20", now, refused(sample.Huge)},
		{"in 2262", "5729.20", time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC), nil},
		{"in 9999", "5729.20", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), refused(sample.OutOfRange)},
		{"in year 1", "5729.20", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), refused(sample.OutOfRange)},
		{"just past the end", "5729.20", sample.MaxTime.Add(time.Nanosecond), refused(sample.OutOfRange)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser("llamacpp")
			if err != nil {
				t.Fatal(err)
			}
			var got []sample.Discard
			st := &Stream{Discarded: func(d sample.Discard) { got = append(got, d) }}
			line := "slot print_timing: id  0 | task 7 |        eval time = " + tc.ms + " ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)"
			rec, ok := p.Parse([]byte(line))
			if !ok {
				t.Fatal("line not parsed")
			}
			if _, ok = st.Interval(rec, tc.at); ok != (tc.want == nil) {
				t.Errorf("taken %v, want %v", ok, tc.want == nil)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("discards %v, want %v", got, tc.want)
			}
		})
	}
}
