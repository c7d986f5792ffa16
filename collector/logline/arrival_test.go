package logline

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// TestLlamaArrival: a llama.cpp request's time to first token counts from
// its arrival where the log's stamps time it, and says from which line
// (the real server's lines, -lv 3 and -lv 4; figures by hand from their
// stamps); the prefill only where they do not, and never an arrival that
// cannot be the request's.
func TestLlamaArrival(t *testing.T) {
	ms := func(v float64) float64 { return v / 1000 }
	// One request at -lv 4 with --log-timestamps: its HTTP handler's line.
	lv4 := []string{
		"0.04.188.718 I srv  server_strea: conv_id= (empty=1)",
		"0.04.190.452 I slot get_availabl: id  7 | task -1 | selected slot by LRU, t_last = -1",
		"0.04.190.712 I slot launch_slot_: id  7 | task 0 | processing task, is_child = 0",
		"0.04.354.046 I slot print_timing: id  7 | task 0 | prompt eval time =      10.54 ms /    10 tokens (    1.05 ms per token,   948.77 tokens per second)",
		"0.04.354.136 I slot print_timing: id  7 | task 0 |        eval time =     152.69 ms /    64 tokens (    2.42 ms per token,   412.60 tokens per second)",
	}
	// The sweep's recording (-lv 3, docker's stamps and llama.cpp's):
	// two slots picked before either launched, each launch its own.
	lv3 := []string{
		"2026-12-01T20:17:00.047376646Z 0.26.301.295 I slot get_availabl: id  6 | task -1 | selected slot by LRU, t_last = -1",
		"2026-12-01T20:17:00.047622502Z 0.26.301.634 I slot launch_slot_: id  6 | task 27 | processing task, is_child = 0",
		"2026-12-01T20:17:00.047630938Z 0.26.301.667 I slot get_availabl: id  5 | task -1 | selected slot by LRU, t_last = -1",
		"2026-12-01T20:17:00.047637199Z 0.26.301.710 I slot launch_slot_: id  5 | task 28 | processing task, is_child = 0",
		"2026-12-01T20:17:00.295468274Z 0.26.549.480 I slot print_timing: id  5 | task 28 | prompt eval time =      19.12 ms /     9 tokens (    2.12 ms per token,   470.64 tokens per second)",
		"2026-12-01T20:17:00.295530713Z 0.26.549.487 I slot print_timing: id  5 | task 28 |        eval time =     228.28 ms /    64 tokens (    3.62 ms per token,   275.97 tokens per second)",
	}
	stripElapsed := func(ls []string) []string {
		var out []string
		for _, l := range ls {
			f := strings.SplitN(l, " ", 3)
			out = append(out, f[0]+" "+f[2])
		}
		return out
	}
	stripAll := func(ls []string) []string {
		var out []string
		for _, l := range ls {
			out = append(out, strings.SplitN(l, " ", 2)[1])
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		timestamps bool // replay: the parser reads wall-clock stamps
		lines      []string
		key        string
		ttft       float64
		basis      sample.TTFTBasis
		eval       float64
	}{
		{"lv 4: from the HTTP handler's line", false, lv4, "slot 7 task 0", 4.354136 - ms(152.69) - 4.188718, sample.TTFTHTTP, ms(152.69)},
		{"lv 3: from the selected slot, on llama.cpp's stamps over docker's", true, lv3, "slot 5 task 28",
			26.549487 - ms(228.28) - 26.301667, sample.TTFTSlot, ms(228.28)},
		{"docker's stamps alone, in replay", true, stripElapsed(lv3), "slot 5 task 28",
			0.295530713 - ms(228.28) - 0.047630938, sample.TTFTSlot, ms(228.28)},
		{"docker's stamps are not read live: the prefill", false, stripElapsed(lv3), "slot 5 task 28", ms(19.12), sample.TTFTPrefill, ms(228.28)},
		{"no stamps: the prefill", true, stripAll(lv4), "slot 7 task 0", ms(10.54), sample.TTFTPrefill, ms(152.69)},
		{"n = 2: the child launched first shares the request's HTTP line", false, []string{
			"0.04.040.337 I srv  server_strea: conv_id= (empty=1)",
			"0.04.040.905 I slot get_availabl: id  1 | task -1 | selected slot by LCP similarity, f_sim_best = 1.000 (> 0.100 thold), f_keep = 0.400",
			"0.04.041.194 I slot launch_slot_: id  0 | task 16 | processing task, is_child = 1",
			"0.04.041.283 I slot launch_slot_: id  1 | task 15 | processing task, is_child = 0",
			"0.04.053.274 I slot print_timing: id  0 | task 16 | prompt eval time =       2.28 ms /     1 tokens (    2.28 ms per token,   438.40 tokens per second)",
			"0.04.053.334 I slot print_timing: id  0 | task 16 |        eval time =       9.68 ms /     4 tokens (    3.23 ms per token,   310.08 tokens per second)",
			"0.04.053.579 I slot print_timing: id  1 | task 15 | prompt eval time =       2.34 ms /     1 tokens (    2.34 ms per token,   426.62 tokens per second)",
			"0.04.053.621 I slot print_timing: id  1 | task 15 |        eval time =       9.93 ms /     4 tokens (    3.31 ms per token,   302.21 tokens per second)",
		}, "slot 0 task 16", 4.053334 - ms(9.68) - 4.040337, sample.TTFTHTTP, ms(9.68)},
		{"a stale HTTP line is dropped when the server is idle", false, append([]string{
			"0.01.000.000 I srv  server_strea: conv_id= (empty=1)",
			"0.03.000.000 I srv  update_slots: all slots are idle",
		}, lv4[1:]...), "slot 7 task 0", 4.354136 - ms(152.69) - 4.190452, sample.TTFTSlot, ms(152.69)},
		{"an arrival after the prompt began is another request's: the prefill", false, []string{
			"0.04.300.000 I srv  server_strea: conv_id= (empty=1)",
			"0.04.300.200 I slot launch_slot_: id  7 | task 3 | processing task, is_child = 0",
			"0.04.399.000 I slot print_timing: id  7 | task 3 | prompt eval time =      50.00 ms /    10 tokens (    5.00 ms per token,   200.00 tokens per second)",
			"0.04.400.000 I slot print_timing: id  7 | task 3 |        eval time =      80.00 ms /    11 tokens (    7.27 ms per token,   137.50 tokens per second)",
		}, "slot 7 task 3", ms(50), sample.TTFTPrefill, ms(80)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser("llamacpp")
			if err != nil {
				t.Fatal(err)
			}
			p.Timestamps = tc.timestamps
			p.StartedAt = time.Date(2026, 12, 1, 20, 16, 33, 0, time.UTC)
			var s Stream
			at := time.Date(2026, 12, 1, 20, 17, 5, 0, time.UTC)
			var got *sample.Interval
			for _, l := range tc.lines {
				r, ok := p.Parse([]byte(l))
				if !ok {
					continue
				}
				iv, ok := s.Interval(r, at)
				if ok && r.Kind == Request && r.Tokens >= 0 && r.Key == tc.key {
					got = &iv
				}
			}
			if got == nil {
				t.Fatalf("no eval line of %s read", tc.key)
			}
			if math.Abs(got.TTFT-tc.ttft) > 1e-9 || got.TTFTBasis != tc.basis {
				t.Errorf("TTFT %.6f s from %v, want %.6f s from %v", got.TTFT, got.TTFTBasis, tc.ttft, tc.basis)
			}
			// End to end counts from the same arrival: it and the decode.
			if want := tc.ttft + tc.eval; math.Abs(got.E2E-want) > 1e-9 {
				t.Errorf("E2E %.6f s, want %.6f s", got.E2E, want)
			}
		})
	}
}

// TestLlamaArrivalBounded: requests whose lines never come keep no more
// than the bounds.
func TestLlamaArrivalBounded(t *testing.T) {
	p, err := NewParser("llamacpp")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 * maxTracked {
		p.Parse([]byte("0.04.188.718 I srv  server_strea: conv_id= (empty=1)"))
		p.Parse([]byte("0.04.190.452 I slot get_availabl: id  " + strconv.Itoa(i) + " | task -1 | selected slot by LRU, t_last = -1"))
		p.Parse([]byte("0.04.190.712 I slot launch_slot_: id  " + strconv.Itoa(i%8) + " | task " + strconv.Itoa(i) + " | processing task, is_child = 0"))
	}
	for i := range 2 * maxHTTPPending {
		p.Parse([]byte("0.04.188.718 I srv  server_strea: conv_id= (empty=" + strconv.Itoa(i) + ")"))
	}
	if len(p.arr.http) > maxHTTPPending || len(p.arr.sel) > maxTracked || len(p.arr.byKey) > maxTracked {
		t.Errorf("kept %d HTTP lines, %d slots, %d requests", len(p.arr.http), len(p.arr.sel), len(p.arr.byKey))
	}
}

// TestAutoLogSettles: an auto-detected log settles on the format of its
// first record. A vLLM log's lines are then scanned for vLLM's needles
// only and never for llama-server's arrivals; a llama-server log keeps
// reading its arrivals and its Ollama lines, and a parser told its engine
// never settles.
func TestAutoLogSettles(t *testing.T) {
	const (
		vllmStat  = "INFO 01-22 18:27:25 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.1%, CPU KV cache usage: 0.0%."
		llamaHTTP = "0.04.188.718 I srv  server_strea: conv_id= (empty=1)"
		llamaEval = "0.04.354.136 I slot print_timing: id  7 | task 0 |        eval time =     152.69 ms /    64 tokens (    2.42 ms per token,   412.60 tokens per second)"
	)
	for _, tc := range []struct {
		name, engine string
		lines        []string
		format       string
		http         int // arrivals pending after the lines
	}{
		{"vLLM, auto", "auto", []string{vllmStat, llamaHTTP}, "vllm", 0},
		{"llama.cpp, auto", "auto", []string{llamaEval, llamaHTTP}, "llamacpp", 1},
		{"nothing read yet", "auto", []string{llamaHTTP}, "", 1},
		{"llama.cpp, told", "llamacpp", []string{llamaEval, llamaHTTP}, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser(tc.engine)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range tc.lines {
				p.Parse([]byte(l))
			}
			if p.format != tc.format || len(p.arr.http) != tc.http {
				t.Errorf("format %q, %d arrivals pending; want %q, %d", p.format, len(p.arr.http), tc.format, tc.http)
			}
			if tc.format != "" && len(p.needles) != len(needleSets[tc.format]) {
				t.Errorf("%d anchor groups, want %s's %d", len(p.needles), tc.format, len(needleSets[tc.format]))
			}
		})
	}
}
