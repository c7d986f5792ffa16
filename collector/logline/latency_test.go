package logline

import (
	"math"
	"testing"
	"time"
)

// TestRequestLatencies: a finished request's own line gives its latencies,
// exactly: llama.cpp's prompt line its time to first token, joined to its
// eval line by slot and task (the sweep's real lines, every format of the
// line), TGI's Success span its queue, end-to-end time and time per token.
func TestRequestLatencies(t *testing.T) {
	ms := func(v float64) float64 { return v / 1000 }
	for _, tc := range []struct {
		name                   string
		engine                 string
		lines                  []string
		ttft, tpot, e2e, queue float64 // seconds, -1 unknown
	}{
		{"llama.cpp per-line", "llamacpp", []string{
			"2026-12-01T20:17:04.964942858Z 0.31.218.836 I slot print_timing: id  1 | task 825 | prompt eval time =       7.28 ms /    12 tokens (    0.61 ms per token,  1647.90 tokens per second)",
			"2026-12-01T20:17:04.965044562Z 0.31.219.244 I slot print_timing: id  1 | task 825 |        eval time =    1105.34 ms /   192 tokens (    5.79 ms per token,   172.80 tokens per second)",
		}, ms(7.28), ms(1105.34) / 191, ms(7.28 + 1105.34), -1},
		{"llama.cpp multi-line", "llamacpp", []string{
			"slot print_timing: id  0 | task 7 | ",
			"prompt eval time =      10.00 ms /     4 tokens (    2.50 ms per token,   400.00 tokens per second)",
			"       eval time =     100.00 ms /    11 tokens (    9.09 ms per token,   110.00 tokens per second)",
		}, ms(10), ms(10), ms(110), -1},
		{"llama.cpp another task's prompt line is not this one's", "llamacpp", []string{
			"I slot print_timing: id  1 | task 9 | prompt eval time =       7.00 ms /    12 tokens (    0.61 ms per token,  1647.90 tokens per second)",
			"I slot print_timing: id  1 | task 8 |        eval time =     100.00 ms /   11 tokens (    5.79 ms per token,   172.80 tokens per second)",
		}, -1, ms(10), -1, -1},
		{"llama.cpp one token: no gap", "llamacpp", []string{
			"I slot print_timing: id  1 | task 8 |        eval time =       1.00 ms /     1 tokens (    1.00 ms per token,  1000.00 tokens per second)",
		}, -1, -1, -1, -1},
		{"TGI Success", "tgi", []string{
			`2024-12-10T21:50:03.478010Z  INFO chat_completions{total_time="735.200735ms" validation_time="955.594µs" queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="Some(13465365087046561476)"}: text_generation_router::server: router/src/server.rs:622: Success`,
		}, -1, ms(36.708605), ms(735.200735), 73.176e-6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewParser(tc.engine)
			if err != nil {
				t.Fatal(err)
			}
			var s Stream
			at := time.Date(2026, 12, 1, 20, 17, 5, 0, time.UTC)
			var last *Record
			var got []float64
			for _, l := range tc.lines {
				r, ok := p.Parse([]byte(l))
				if !ok {
					continue
				}
				iv, ok := s.Interval(r, at)
				if ok && r.Kind == Request && r.Tokens >= 0 {
					last = &r
					got = []float64{iv.TTFT, iv.TPOT, iv.E2E, iv.Queue}
				}
			}
			if last == nil {
				t.Fatal("no request line read")
			}
			for i, want := range []float64{tc.ttft, tc.tpot, tc.e2e, tc.queue} {
				if math.Abs(got[i]-want) > 1e-9 {
					t.Errorf("latency %d: %g, want %g", i, got[i], want)
				}
			}
		})
	}
}
