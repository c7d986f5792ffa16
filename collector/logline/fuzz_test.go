package logline

import (
	"math"
	"testing"
	"time"
)

// fuzzParser feeds arbitrary lines to one engine's parser and the stream
// behind it: no panic, no NaN or infinity, no negative token count.
func fuzzParser(f *testing.F, engine string, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		p, err := NewParser(engine)
		if err != nil {
			t.Fatal(err)
		}
		var st Stream
		now := time.Unix(1_700_000_000, 0)
		for i := range 2 { // twice: state carried from the first line
			r, ok := p.Parse(line)
			if !ok {
				continue
			}
			for _, v := range []float64{r.GenTPS, r.PromptTPS, r.Tokens, r.PromptTokens, r.UserTPS, r.Running, r.Waiting, r.KV} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("record %+v carries %v", r, v)
				}
			}
			iv, ok := st.Interval(r, now.Add(time.Duration(i)*time.Second))
			if ok && (iv.End.Before(iv.Start) || math.IsNaN(iv.Tokens) || iv.Tokens < -1) {
				t.Fatalf("interval %+v from %+v", iv, r)
			}
		}
	})
}

func FuzzVLLM(f *testing.F) {
	fuzzParser(f, "vllm",
		"(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%",
		"INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 44.9 tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV cache usage: 0.0%",
		"2026-05-12T08:01:39.331095044Z (APIServer pid=1) INFO 05-12 08:01:39 [loggers.py:271] 2 Engines Aggregated: Avg prompt throughput: 6335.3 tokens/s, Avg generation throughput: 4.8 tokens/s, Running: 9 reqs, Waiting: 0 reqs, Preemptions: 2, GPU KV cache usage: 62.8%")
}

func FuzzSGLang(f *testing.F) {
	fuzzParser(f, "sglang",
		"[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
		"[04:40:55 TP0] Decode batch. #running-req: 2, #token: 4078, token usage: 0.00, gen throughput (token/s): 447.31, #queue-req: 0",
		"[2025-05-14 09:31:43 DP1 TP0] Prefill batch. #new-seq: 2, #new-token: 2, #cached-token: 8027, token usage: 0.26, #running-req: 28, #queue-req: 0")
}

func FuzzLlamaCPP(f *testing.F) {
	fuzzParser(f, "llamacpp",
		"slot print_timing: id  0 | task 0 |",
		"       eval time =   23038.87 ms /   275 tokens (   83.78 ms per token,    11.94 tokens per second)",
		"5.34.346.441 I slot print_timing: id  0 | task 202 | n_gen =    100, tg =  19.04 t/s, tg_3s =  19.23 t/s",
		`{"tid":"14964","timestamp":1717067386,"level":"INFO","function":"print_timings","line":337,"msg":"generation eval time =    3559.27 ms /    25 runs   (  142.37 ms per token,     7.02 tokens per second)","id_slot":0,"id_task":19,"t_token_generation":3559.272,"n_decoded":25,"t_token":142.37088,"n_tokens_second":7.023908259891348}`)
}

func FuzzTGI(f *testing.F) {
	fuzzParser(f, "tgi",
		`2024-12-10T21:50:03.478010Z  INFO chat_completions{total_time="735.200735ms" validation_time="955.594µs" queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="Some(13465365087046561476)"}: text_generation_router::server: router/src/server.rs:622: Success`,
		`{"timestamp":"2024-12-10T21:50:03.47801Z","level":"INFO","message":"Success","target":"text_generation_router::server","span":{"inference_time":"734.172108ms","queue_time":"51.2µs","time_per_token":"36.708605ms","total_time":"735.9ms","name":"chat_completions"},"spans":[{"name":"chat_completions"}]}`)
}

func FuzzLMDeploy(f *testing.F) {
	fuzzParser(f, "lmdeploy",
		"[2026-02-05 17:05:17 DP0] Avg thr (in/out): 4618.5 / 2756.3 tokens/s, API server (completed/routed/waiting): 1 / 50 / 50, Engine (running/waiting): 45 / 5, KV cache: 21.6%, ",
		"[2025-09-01 10:00:00 DP1] Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: 900.0 tokens/s, Finished: 3 reqs, Unfinished: 9 reqs, Running: 9 reqs, Waiting: 1 reqs, GPU KV cache usage: 40.0%")
}

func FuzzTRTLLM(f *testing.F) {
	fuzzParser(f, "trtllm",
		`I1120 02:29:01.795279 42888 libtensorrtllm.cc:1009] {"Active Request Count":1,"Iteration Counter":200,"Timestamp":"11-20-2023 02:29:01"}`,
		"iter = 120, global_rank = 0, rank = 0, currank_total_requests = 8/8, host_step_time = 25.0ms, prev_device_step_time = 24 ms, timestamp = 2026-05-01 10:00:00, num_scheduled_requests: 8, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 8}")
}

func FuzzAuto(f *testing.F) {
	fuzzParser(f, "auto", "Jan 28 05:07:10 host ollama[373]: slot print_timing: id  0 | task 1 | prompt eval time = 1.0 ms / 1 tokens (1.0 ms per token, 1.0 tokens per second)")
}
