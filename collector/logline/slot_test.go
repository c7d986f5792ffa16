package logline

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLlamaSlotSpan: a llama.cpp request counts in running from when the
// server's loop took it into a slot (its "selected slot" line, else its
// launch), as llama.cpp's own requests_processing counts it, not from its
// first token: its eval time leaves out the prompt and the slot's set-up
// (13 ms of a 250-900 ms request in the sweep recording). Its tokens stay
// over its decode. Where the stamps do not time the slot, its prompt and
// decode (llama.cpp's total time), and never less. Figures by hand from
// the fixtures' stamps.
func TestLlamaSlotSpan(t *testing.T) {
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !strings.HasPrefix(l, "# source:") {
				out = append(out, l)
			}
		}
		return out
	}
	sweep := read("llamacpp_slot_spans_sweep.log")
	drop := func(ls []string, what string) []string {
		var out []string
		for _, l := range ls {
			if !strings.Contains(l, what) {
				out = append(out, l)
			}
		}
		return out
	}
	// cut removes the first n space-separated fields of every line:
	// the relay's stamp, then llama.cpp's.
	cut := func(ls []string, n int) []string {
		var out []string
		for _, l := range ls {
			out = append(out, strings.SplitN(l, " ", n+1)[n])
		}
		return out
	}
	// The relay's stamps alone: llama.cpp's cut out.
	var wall []string
	for _, l := range sweep {
		f := strings.SplitN(l, " ", 3)
		wall = append(wall, f[0]+" "+f[2])
	}
	type span struct {
		held float64 // seconds before the eval line; -1: only its decode
		eval float64 // the decode, its tokens' span
	}
	ms := func(v float64) float64 { return v / 1000 }
	tests := []struct {
		name       string
		timestamps bool // replay: the parser reads wall-clock stamps
		lines      []string
		want       map[string]span // by key: the eval line's interval
	}{
		{"-lv 3: from the selected slot, on llama.cpp's stamps", true, sweep, map[string]span{
			"slot 5 task 28": {26.549487 - 26.301667, ms(228.28)},
			"slot 4 task 29": {26.707545 - 26.301711, ms(388.45)},
			"slot 7 task 25": {26.864323 - 26.260544, ms(564.58)},
			"slot 3 task 95": {27.044639 - 26.555397, ms(479.27)},
			"slot 6 task 27": {27.200756 - 26.301295, ms(876.96)},
		}},
		{"no selected-slot line: from the launch", true, drop(sweep, "selected slot"), map[string]span{
			"slot 5 task 28": {26.549487 - 26.301710, ms(228.28)},
			"slot 4 task 29": {26.707545 - 26.301812, ms(388.45)},
			"slot 7 task 25": {26.864323 - 26.260739, ms(564.58)},
			"slot 3 task 95": {27.044639 - 26.555421, ms(479.27)},
			"slot 6 task 27": {27.200756 - 26.301634, ms(876.96)},
		}},
		// The relay read the first lines in a burst, 18 ms late: on its
		// stamps task 25's slot (586 ms) is shorter than its prompt and
		// decode.
		{"the relay's stamps alone, in replay; never less than its prompt and decode", true, wall, map[string]span{
			"slot 5 task 28": {0.295530713 - 0.047630938, ms(228.28)},
			"slot 4 task 29": {0.453700526 - 0.047642760, ms(388.45)},
			"slot 7 task 25": {ms(38.80 + 564.58), ms(564.58)},
			"slot 3 task 95": {0.790772807 - 0.301300750, ms(479.27)},
			"slot 6 task 27": {0.947766392 - 0.047376646, ms(876.96)},
		}},
		{"no stamps: its prompt and decode", true, cut(sweep, 2), map[string]span{
			"slot 5 task 28": {ms(19.12 + 228.28), ms(228.28)},
			"slot 4 task 29": {ms(17.23 + 388.45), ms(388.45)},
			"slot 7 task 25": {ms(38.80 + 564.58), ms(564.58)},
			"slot 3 task 95": {ms(8.05 + 479.27), ms(479.27)},
			"slot 6 task 27": {ms(21.64 + 876.96), ms(876.96)},
		}},
		{"a launch stamped after its prompt began: its prompt and decode", false, []string{
			"0.04.300.200 I slot launch_slot_: id  7 | task 3 | processing task, is_child = 0",
			"0.04.399.000 I slot print_timing: id  7 | task 3 | prompt eval time =      50.00 ms /    10 tokens (    5.00 ms per token,   200.00 tokens per second)",
			"0.04.400.000 I slot print_timing: id  7 | task 3 |        eval time =      80.00 ms /    11 tokens (    7.27 ms per token,   137.50 tokens per second)",
		}, map[string]span{"slot 7 task 3": {ms(130), ms(80)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser("llamacpp")
			if err != nil {
				t.Fatal(err)
			}
			p.Timestamps = tc.timestamps
			var s Stream
			at := time.Date(2026, 12, 1, 20, 17, 5, 0, time.UTC)
			seen := map[string]bool{}
			for _, l := range tc.lines {
				r, ok := p.Parse([]byte(l))
				if !ok || r.Kind != Request {
					continue
				}
				iv, ok := s.Interval(r, at)
				if r.Tokens < 0 {
					// A prompt line's tokens go out on its request's eval
					// line, whose span is its slot's.
					if ok {
						t.Errorf("%s: a prompt line gave an interval of its own: %+v", r.Key, iv)
					}
					continue
				}
				if !ok {
					t.Fatalf("%s: refused", l)
				}
				if iv.PromptTokens < 0 {
					t.Errorf("%s: the eval line carries no prompt tokens of its prompt line", r.Key)
				}
				want, ok := tc.want[r.Key]
				if !ok {
					t.Fatalf("unexpected request %s", r.Key)
				}
				seen[r.Key] = true
				if !iv.Request || math.Abs(iv.Held-want.held) > 1e-9 || !iv.HeldStart().Equal(at.Add(-seconds(iv.Held))) {
					t.Errorf("%s: held %.6f s from %v (request %v), want %.6f s before its eval line", r.Key, iv.Held, iv.HeldStart(), iv.Request, want.held)
				}
				if d := iv.End.Sub(iv.Start).Seconds(); !iv.End.Equal(at) || math.Abs(d-want.eval) > 1e-9 || iv.Tokens != r.Tokens {
					t.Errorf("%s: its %v tokens over %.6f s to %v, want %v over its decode, %.6f s to %v", r.Key, iv.Tokens, d, iv.End, r.Tokens, want.eval, at)
				}
			}
			if len(seen) != len(tc.want) {
				t.Errorf("read %d of the %d requests' eval lines", len(seen), len(tc.want))
			}
		})
	}
}

// TestLlamaSlotSpanProgress: a request that printed progress lines counts
// in running from its slot on its first progress line, which dates its
// first tokens; its eval line then adds only the rest of its decode. The
// live sweep's -lv 4 log: the HTTP handler's line (6 ms before the slot)
// is its time to first token's start, not its slot's.
func TestLlamaSlotSpanProgress(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "llamacpp_slot_spans_lv4_progress.log"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewParser("llamacpp")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 2, 3, 11, 49, 0, time.UTC)
	var s Stream
	type got struct {
		kind              Kind
		held, start, end  float64 // seconds of the server's clock
		tokens, ttft, e2e float64
	}
	var ivs []got
	for _, l := range bytes.Split(b, []byte("\n")) {
		r, ok := p.Parse(l)
		if !ok || r.Kind != Progress && (r.Kind != Request || r.Tokens < 0) {
			continue
		}
		d, ok := elapsed(l)
		if !ok {
			t.Fatalf("%s: no stamp", l)
		}
		iv, ok := s.Interval(r, start.Add(d))
		if !ok || !iv.Request {
			t.Fatalf("%s: refused (%v) or not a request's span", l, ok)
		}
		ivs = append(ivs, got{r.Kind, iv.Held, iv.Start.Sub(start).Seconds(), iv.End.Sub(start).Seconds(), iv.Tokens, iv.TTFT, iv.E2E})
		if hs := iv.HeldStart().Sub(start).Seconds(); iv.Held > 0 && math.Abs(hs-(iv.End.Sub(start).Seconds()-iv.Held)) > 1e-9 {
			t.Errorf("%v: held from %.6f s, %v s before its end %.6f s", r.Kind, hs, iv.Held, iv.End.Sub(start).Seconds())
		}
	}
	first := 100.416375 - 178/58.84 // its 178 tokens at its average speed
	want := []got{
		{Progress, 100.416375 - 97.380615, first, 100.416375, 178, -1, -1},
		{Request, -1, 100.416375, 100.861724, 192 - 178, 100.861724 - 3.45542 - 97.374573, 100.861724 - 97.374573},
	}
	if len(ivs) != len(want) {
		t.Fatalf("%d intervals, want %d: %+v", len(ivs), len(want), ivs)
	}
	for i, w := range want {
		g := ivs[i]
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
		if g.kind != w.kind || !near(g.held, w.held) || !near(g.start, w.start) || !near(g.end, w.end) || g.tokens != w.tokens ||
			!near(g.ttft, w.ttft) || !near(g.e2e, w.e2e) {
			t.Errorf("interval %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
