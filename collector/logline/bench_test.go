package logline

import "testing"

var benchLines = map[string]string{
	"vllm":     "(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43 reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%",
	"sglang":   "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
	"llamacpp": "5.27.453.097 I slot print_timing: id  0 | task 160 |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)",
	"tgi":      `2024-12-10T21:50:03.478010Z  INFO chat_completions{total_time="735.200735ms" validation_time="955.594µs" queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="Some(13465365087046561476)"}: text_generation_router::server: router/src/server.rs:622: Success`,
	"lmdeploy": "[2026-02-05 17:05:17 DP0] Avg thr (in/out): 4618.5 / 2756.3 tokens/s, API server (completed/routed/waiting): 1 / 50 / 50, Engine (running/waiting): 45 / 5, KV cache: 21.6%, ",
	"trtllm":   `I1120 02:29:01.795279 42888 libtensorrtllm.cc:1009] {"Active Request Count":1,"Iteration Counter":200,"Timestamp":"11-20-2023 02:29:01"}`,
	// Most lines of a busy log carry no throughput at all.
	"vllm-noise": `(APIServer pid=3646) INFO:     10.0.0.7:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK`,
}

func BenchmarkParse(b *testing.B) {
	for _, engine := range []string{"vllm", "sglang", "llamacpp", "tgi", "lmdeploy", "trtllm", "vllm-noise"} {
		line := []byte(benchLines[engine])
		b.Run(engine, func(b *testing.B) {
			name := engine
			if name == "vllm-noise" {
				name = "vllm"
			}
			p, _ := NewParser(name)
			b.SetBytes(int64(len(line)))
			b.ReportAllocs()
			for range b.N {
				p.Parse(line)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
		})
	}
}
