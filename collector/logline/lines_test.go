package logline

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/engine"
)

func TestParseLines(t *testing.T) {
	tests := []struct {
		name   string
		engine string
		line   string
		want   string // "" = no record
	}{
		{"vLLM through journald with ANSI colour", "auto",
			"Jan 28 05:07:10 gpu7 vllm[373]: \x1b[36m(APIServer pid=7)\x1b[0m INFO 01-28 05:07:10 [loggers.py:271] Engine 001: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 500.5 tokens/s, Running: 7 reqs, Waiting: 2 reqs, Preemptions: 3, GPU KV cache usage: 91.0%, Prefix cache hit rate: 0.0%",
			`stat gen=500.5 prompt=10 run=7 wait=2 kv=0.91 preempt=3 key="engine 001" t=2026-01-28T05:07:10Z`},
		{"vLLM aggregated data-parallel line via compose", "vllm",
			"vllm-1  | INFO 03-01 12:00:00 [loggers.py:300] 4 Engines Aggregated: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 4000.0 tokens/s, Running: 64 reqs, Waiting: 0 reqs, GPU KV cache usage: 50.0%, Prefix cache hit rate: 0.0%",
			`stat gen=4000 prompt=0 run=64 wait=0 kv=0.5 aggregated t=2026-03-01T12:00:00Z`},
		{"LMDeploy v0.10-0.13 is not read as vLLM", "auto",
			"[2025-09-01 10:00:00 DP1] Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Finished: 3 reqs, Unfinished: 9 reqs, Running: 9 reqs, Waiting: 1 reqs, GPU KV cache usage: 40.0%",
			`stat gen=900 prompt=100 run=9 wait=1 kv=0.4 key="DP1" t=2025-09-01T10:00:00Z`},
		{"LMDeploy v0.14+ released form", "lmdeploy",
			"[2026-03-01 08:00:10 DP0] Avg thr (in/out): 10.0 / 250.5 tokens/s, Server (succeeded/failed/routed/waiting): 5 / 0 / 12 / 1, Engine (running/waiting): 12 / 1, KV cache: 30.0%, ",
			`stat gen=250.5 prompt=10 run=12 wait=1 kv=0.3 key="DP0" t=2026-03-01T08:00:10Z`},
		{"SGLang tensor-parallel rank 1 logs the same batch", "sglang",
			"[2026-04-08 14:05:21 TP1] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0", ""},
		{"SGLang data-parallel rank", "sglang",
			"[2026-04-08 14:05:21 DP1 TP0] Decode batch, #running-req: 5, #token: 20800, full token usage: 0.29, #swa token: 1, swa token usage: 0.01, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 2, ",
			`stat gen=144.95 span=1.38s run=5 wait=2 kv=0.29 key="DP1" t=2026-04-08T14:05:21Z`},
		{"TGI with microsecond times and the s unit", "tgi",
			`2024-12-10T21:50:03.478010Z  INFO generate_stream{total_time="2.5s" validation_time="12us" queue_time="3.1ms" inference_time="2s" time_per_token="20ms" seed="None"}: text_generation_router::server: router/src/server.rs:500: Success`,
			`request tokens=100 dur=2s user=50 key="generate_stream" t=2024-12-10T21:50:03.47801Z`},
		{"TensorRT-LLM PyTorch iteration log", "trtllm",
			"[TRT-LLM] [I] iter = 120, global_rank = 0, rank = 0, currank_total_requests = 8/8, host_step_time = 25.0ms, prev_device_step_time = 24 ms, timestamp = 2026-05-01 10:00:00, num_scheduled_requests: 8, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 8}",
			`request tokens=8 dur=25ms user=40 run=8 iter=120 key="iterations" t=2026-05-01T10:00:00Z`},
		// TensorRT-LLM PR #3914: 16 generation tokens, 10 of real requests,
		// 6 of CUDA-graph padding.
		{"TensorRT-LLM 2025-04 iteration log: elapsed_time, padding", "trtllm",
			"[04/28/2025-09:56:44] [TRT-LLM] [I] iter = 198, global_rank = 0, rank = 0, currank_total_requests = 0/0, elapsed_time = 0.005060911178588867s, timestamp = 2025-04-28 09:56:44, num_scheduled_requests: 10, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 16}",
			`request tokens=10 dur=5.060911ms user=197.593 run=10 iter=198 key="iterations" t=2025-04-28T09:56:44Z`},
		{"TensorRT-LLM iteration log before num_scheduled_requests: padded", "trtllm",
			"[04/28/2025-09:56:44] [TRT-LLM] [I] iter = 198, global_rank = 0, rank = 0, currank_total_requests = 0/0, elapsed_time = 0.005060911178588867s, timestamp = 2025-04-28 09:56:44, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 16}", ""},
		{"TensorRT-LLM prefill step makes no generation token", "trtllm",
			"[05/20/2026-23:24:41] [TRT-LLM] [I] iter = 1, global_rank = 0, rank = 0, currank_total_requests = 0/1, host_step_time = 45810.21428108215ms, prev_device_step_time = N/A, timestamp = 2026-05-20 23:24:41, num_scheduled_requests: 1, states = {'num_ctx_requests': 1, 'num_ctx_tokens': 13694, 'num_generation_tokens': 0}",
			`request tokens=0 dur=45.810214281s run=1 iter=1 key="iterations" t=2026-05-20T23:24:41Z`},
		{"TensorRT-LLM 2026 layout: rank prefix, num_scheduled_requests first", "trtllm",
			"[TRT-LLM] [I] [_torch][RANK 0] iter = 260, global_rank = 0, rank = 0, num_scheduled_requests = 4, kv_cache_util = 0.1, currank_total_requests = 0/1, host_step_time = 7.3ms, prev_device_step_time = 7.1ms, timestamp = 2026-08-23 01:02:03, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 8}",
			`request tokens=4 dur=7.3ms user=136.986 run=4 iter=260 key="iterations" t=2026-08-23T01:02:03Z`},
		{"llama-cli summary is no server", "llamacpp",
			"llama_perf_context_print:        eval time =   14085.85 ms /   178 runs   (   79.13 ms per token,    12.64 tokens per second)", ""},
		{"garbage", "auto", "\x00\xff\xfe Avg generation throughput: lots", ""},
		// The fixture's real line (club-3090 #1124) with its two counts
		// swapped: more accepted than drafted cannot be.
		{"llama.cpp draft acceptance above one is refused", "llamacpp",
			"5.27.453.102 I slot print_timing: id  0 | task 160 | draft acceptance = 0.46218 (  119 accepted /    55 generated), mean len =  2.38", ""},
		{"llama.cpp draft acceptance", "llamacpp",
			"5.27.453.102 I slot print_timing: id  0 | task 160 | draft acceptance = 0.46218 (   55 accepted /   119 generated), mean len =  2.38",
			`spec drafted=119 accepted=55 key="slot 0 task 160"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewParser(tt.engine)
			if err != nil {
				t.Fatal(err)
			}
			p.Year, p.Timestamps = 2026, true
			r, ok := p.Parse([]byte(tt.line))
			got := ""
			if ok {
				got = format(r)
			}
			if got != tt.want {
				t.Errorf("\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestGarbledLinesCounted(t *testing.T) {
	p, _ := NewParser("auto")
	p.Parse([]byte("INFO Avg generation throughput: broken line"))
	p.Parse([]byte("[00:00:01 TP0] Decode batch. #running-req: x"))
	if p.Skipped != 2 {
		t.Errorf("skipped %d, want 2", p.Skipped)
	}
}

func TestHugeLineBounded(t *testing.T) {
	p, _ := NewParser("auto")
	line := append(bytes.Repeat([]byte("x"), 10<<20), []byte(" Avg generation throughput: 1.0 tokens/s")...)
	if _, ok := p.Parse(line); ok {
		t.Error("a line past the bound was matched at its end")
	}
	if p.Truncated != 1 {
		t.Errorf("truncated %d, want 1", p.Truncated)
	}
	// The bound is what is scanned: the regexp work does not depend on
	// the line's length.
	allocs := testing.AllocsPerRun(3, func() { p.Parse(line) })
	if allocs > 50 {
		t.Errorf("%v allocations for a 10 MB line", allocs)
	}
}

func TestNewParserUnknown(t *testing.T) {
	if _, err := NewParser("gpt"); !errors.Is(err, engine.ErrUnknown) {
		t.Errorf("unknown engine: %v", err)
	}
}

// The log formats are those the registry's engines are read with, no
// more, no fewer.
func TestFormatsMatchRegistry(t *testing.T) {
	used := map[string]bool{}
	for _, e := range engine.All {
		if e.Log == "" {
			continue
		}
		used[e.Log] = true
		if _, ok := needles[e.Log]; !ok {
			t.Errorf("%s: the registry reads its log as %q; logline has no such format", e.Name, e.Log)
		}
	}
	for f := range needles {
		if !used[f] {
			t.Errorf("log format %s: no engine of the registry is read with it", f)
		}
	}
}

func TestStreamIntervals(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	stat := func(key string, gen, run float64) Record {
		r := newRecord(Stat, "vllm")
		r.Key, r.GenTPS, r.PromptTPS, r.Running, r.DefaultGap = key, gen, 0, run, 10*time.Second
		return r
	}
	var s Stream
	// First line: the engine's interval; then the gap; a long silence
	// (idle intervals are logged at DEBUG) falls back to the interval.
	iv1, _ := s.Interval(stat("engine 000", 100, 4), at(10))
	iv2, _ := s.Interval(stat("engine 000", 100, 4), at(20))
	iv3, _ := s.Interval(stat("engine 000", 50, 2), at(200))
	check := func(name string, gotStart, gotEnd time.Time, gotTok float64, start, end, tok float64) {
		if !gotStart.Equal(at(start)) || !gotEnd.Equal(at(end)) || math.Abs(gotTok-tok) > 1e-9 {
			t.Errorf("%s: (%v, %v] tokens %v, want (%v, %v] %v", name, gotStart.Sub(t0), gotEnd.Sub(t0), gotTok, start, end, tok)
		}
	}
	check("first", iv1.Start, iv1.End, iv1.Tokens, 0, 10, 1000)
	check("second", iv2.Start, iv2.End, iv2.Tokens, 10, 20, 1000)
	check("after idle", iv3.Start, iv3.End, iv3.Tokens, 190, 200, 500)

	// Two engines' lines interleaved (data parallel): each line's span runs
	// back to its own engine's previous line, not to the other's.
	var dp Stream
	for i, c := range []struct {
		key               string
		at, start, tokens float64
	}{
		{"engine 000", 10, 0, 1000}, {"engine 001", 14, 4, 1000}, {"engine 000", 20, 10, 1000},
		{"engine 001", 25, 14, 1100}, {"engine 001", 33, 25, 800}, {"engine 000", 31, 20, 1100},
	} {
		iv, _ := dp.Interval(stat(c.key, 100, 1), at(c.at))
		check(fmt.Sprintf("interleaved %d (%s)", i, c.key), iv.Start, iv.End, iv.Tokens, c.start, c.at, c.tokens)
	}

	// Once an aggregated line is seen, per-engine lines are not added.
	agg := stat("", 300, 9)
	agg.Aggregated = true
	if _, ok := s.Interval(agg, at(210)); !ok {
		t.Error("aggregated line dropped")
	}
	if _, ok := s.Interval(stat("engine 001", 100, 3), at(210)); ok {
		t.Error("per-engine line counted beside the aggregated one")
	}

	// llama.cpp: progress lines count as they go; the final line adds the rest.
	var ls Stream
	prog := func(tok, tg float64) Record {
		r := newRecord(Progress, "llamacpp")
		r.Key, r.Tokens, r.UserTPS = "slot 0 task 1", tok, tg
		return r
	}
	a, _ := ls.Interval(prog(100, 20), at(5))
	b, _ := ls.Interval(prog(160, 20), at(8))
	fin := newRecord(Request, "llamacpp")
	fin.Key, fin.Tokens, fin.Duration, fin.UserTPS = "slot 0 task 1", 200, 10*time.Second, 20
	c, _ := ls.Interval(fin, at(10))
	check("first progress", a.Start, a.End, a.Tokens, 0, 5, 100)
	check("progress", b.Start, b.End, b.Tokens, 5, 8, 60)
	check("final rest", c.Start, c.End, c.Tokens, 8, 10, 40)
	if !a.Request || !c.Request {
		t.Error("request spans not marked")
	}
}
