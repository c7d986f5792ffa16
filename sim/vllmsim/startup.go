package vllmsim

import (
	"fmt"
	"io"
	"time"
)

// Startup is what a simulated vLLM V1 server logs as it starts, in
// vLLM's formats since 0.10 (process prefixes, [file:line]): the API
// server's non-default args and the engine core's config line, both
// naming Model as it was given (a directory or a Hugging Face repo id),
// then the weights each GPU holds and the KV cache's capacity.
type Startup struct {
	Model      string
	Version    string // "" is 0.11.0
	WeightsGiB float64
	KVTokens   int
	At         time.Time
}

// WriteTo writes the start-up lines.
func (s Startup) WriteTo(w io.Writer) (int64, error) {
	v := s.Version
	if v == "" {
		v = "0.11.0"
	}
	at := s.At.Format("01-02 15:04:05")
	n, err := fmt.Fprintf(w, `(APIServer pid=1) INFO %[1]s [api_server.py:1839] vLLM API server version %[2]s
(APIServer pid=1) INFO %[1]s [utils.py:233] non-default args: {'model_tag': %[3]s, 'host': '0.0.0.0', 'model': %[3]s, 'gpu_memory_utilization': 0.9}
(EngineCore_DP0 pid=7) INFO %[1]s [core.py:93] Initializing a V1 LLM engine (v%[2]s) with config: model=%[3]s, speculative_config=None, tokenizer=%[3]s, skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=8192, download_dir=None, load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, kv_cache_dtype=auto, device_config=cuda, seed=0, served_model_name=%[3]s, enable_prefix_caching=True
(EngineCore_DP0 pid=7) INFO %[1]s [gpu_model_runner.py:2338] Model loading took %.4[4]f GiB memory and 3.2 seconds
(EngineCore_DP0 pid=7) INFO %[1]s [kv_cache_utils.py:1286] GPU KV cache size: %[5]s tokens
(APIServer pid=1) INFO %[1]s [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000
`, at, v, pyQuote(s.Model), s.WeightsGiB, thousands(s.KVTokens))
	return int64(n), err
}

// pyQuote is Python's repr of a string without quotes or backslashes in
// it, as vLLM's lines print their arguments.
func pyQuote(s string) string { return "'" + s + "'" }

// thousands writes n with comma separators, as vLLM prints token counts.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
