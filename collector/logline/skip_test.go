package logline

import (
	"strings"
	"testing"
)

// A line that looks like an engine's but is not read is counted by
// reason, and the first is kept, cut to 200 bytes, to be told once.
func TestSkipReasons(t *testing.T) {
	long := "INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: " + strings.Repeat("9", 300)
	tests := []struct {
		name, engine, line string
		reason             SkipReason
	}{
		{"a vLLM layout tpsmon does not know", "vllm",
			"INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Queued: 3 reqs", SkipUnparsed},
		{"a TGI span with a duration that does not read", "tgi",
			`2024-12-10T21:50:03.478010Z  INFO generate_stream{total_time="2.5s" validation_time="12us" queue_time="3.1ms" inference_time="2x" time_per_token="20ms" seed="None"}: text_generation_router::server: router/src/server.rs:500: Success`, SkipBadNumber},
		{"a TGI --json-output Success whose duration does not read", "tgi",
			`{"timestamp":"2024-12-10T21:50:03.478010Z","level":"INFO","message":"Success","target":"text_generation_router::server","span":{"inference_time":"2x","time_per_token":"20ms","total_time":"2.5s","name":"generate"},"spans":[]}`, SkipBadNumber},
		{"a TGI --json-output Success without its span's timings", "tgi",
			`{"timestamp":"2024-12-10T21:50:03.478010Z","level":"INFO","message":"Success","target":"text_generation_router::server","span":{"name":"generate"},"spans":[{"name":"generate"}]}`, SkipUnparsed},
		{"a TGI --json-output line cut short", "tgi",
			`{"timestamp":"2024-12-10T21:50:03.478010Z","level":"INFO","message":"Success","target":"text_generation_router::server","span":{"inference_time":"1s","time_per_`, SkipUnparsed},
		{"a TensorRT-LLM iteration line with padded tokens only", "trtllm",
			"[04/28/2025-09:56:44] [TRT-LLM] [I] iter = 198, global_rank = 0, rank = 0, currank_total_requests = 0/0, elapsed_time = 0.005060911178588867s, timestamp = 2025-04-28 09:56:44, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 16}", SkipPadded},
		{"a TensorRT-LLM iteration line of another layout", "trtllm",
			"[TRT-LLM] [I] iter = ?, num_scheduled_requests = ?, prev_device_step_time = 1.0ms", SkipUnparsed},
		{"a line cut at the maximum length", "vllm", long, SkipTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewParser(tt.engine)
			if err != nil {
				t.Fatal(err)
			}
			if tt.reason == SkipTooLong {
				p.maxLine = len(tt.line) - 10 // the tailer cut it mid-number
			}
			for range 3 {
				if _, ok := p.Parse([]byte(tt.line)); ok {
					t.Fatal("read")
				}
			}
			if p.Skipped != 3 || p.SkippedBy[tt.reason] != 3 {
				t.Errorf("skipped %d, by reason %v; want 3 %s", p.Skipped, p.SkippedBy, tt.reason)
			}
			f := p.FirstSkip
			if f == nil {
				t.Fatal("no first skip kept")
			}
			if f.Engine != tt.engine || f.Reason != tt.reason || len(f.Line) > maxSkipLine || !strings.HasPrefix(tt.line, f.Line) {
				t.Errorf("first skip %+v", *f)
			}
			if !strings.Contains(f.String(), tt.reason.String()) || !strings.Contains(f.String(), tt.engine) {
				t.Errorf("message %q names neither reason nor engine", f.String())
			}
		})
	}
}
