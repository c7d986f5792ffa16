package logline

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector"
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
		reason collector.Reason
	}{
		{"99999999999999999999.0", collector.Huge},
		{"1" + strings.Repeat("0", 300) + ".0", collector.Huge},
		{"20000000.0", collector.Huge}, // 2e7 tokens/s: twice the bound
	}
	for _, tc := range tests {
		t.Run(tc.rate, func(t *testing.T) {
			p, err := NewParser("vllm")
			if err != nil {
				t.Fatal(err)
			}
			var got []collector.Discard
			st := &Stream{Discarded: func(d collector.Discard) { got = append(got, d) }}
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

// TestStreamRefusesDaysLongLines: a llama.cpp request that says it ran
// for more than a day is a misprinted duration, refused and counted; one
// of a day is taken.
func TestStreamRefusesDaysLongLines(t *testing.T) {
	line := func(task int, ms string) string {
		return fmt.Sprintf("slot print_timing: id  0 | task %d |        eval time = %s ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)", task, ms)
	}
	tests := []struct {
		ms      string
		refused bool
	}{
		{"5729.20", false},
		{"86400000.00", false}, // a day
		{"86400001.00", true},
		{"99999999999.20", true}, // three years
	}
	for _, tc := range tests {
		t.Run(tc.ms, func(t *testing.T) {
			p, err := NewParser("llamacpp")
			if err != nil {
				t.Fatal(err)
			}
			var got []collector.Discard
			st := &Stream{Discarded: func(d collector.Discard) { got = append(got, d) }}
			rec, ok := p.Parse([]byte(line(7, tc.ms)))
			if !ok {
				t.Fatal("line not parsed")
			}
			_, ok = st.Interval(rec, time.Unix(1_700_000_000, 0))
			if ok == tc.refused {
				t.Errorf("taken %v, want %v", ok, !tc.refused)
			}
			want := []collector.Discard(nil)
			if tc.refused {
				want = []collector.Discard{{Series: "interval", Reason: collector.Huge}}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("discards %v, want %v", got, want)
			}
		})
	}
}

// TestStreamRefusesTimesOutOfRange: a line stamped in a year line protocol
// cannot hold is refused and counted, at either end.
func TestStreamRefusesTimesOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		at      time.Time
		refused bool
	}{
		{"now", time.Unix(1_700_000_000, 0), false},
		{"year 2262, in", time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"year 9999", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), true},
		{"year 1", time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), true},
		{"just past the end", collector.MaxTime.Add(time.Nanosecond), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser("llamacpp")
			if err != nil {
				t.Fatal(err)
			}
			var got []collector.Discard
			st := &Stream{Discarded: func(d collector.Discard) { got = append(got, d) }}
			rec, ok := p.Parse([]byte("slot print_timing: id  0 | task 1 |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)"))
			if !ok {
				t.Fatal("line not parsed")
			}
			if _, ok := st.Interval(rec, tc.at); ok == tc.refused {
				t.Errorf("taken %v, want %v", ok, !tc.refused)
			}
			if tc.refused && (len(got) != 1 || got[0] != collector.Discard{Series: "interval", Reason: collector.OutOfRange}) {
				t.Errorf("discards %v, want one interval range", got)
			}
		})
	}
}
