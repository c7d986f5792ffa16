package collector

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The real llama-server of the concurrency sweep (shared fixtures): its
// /props and /v1/models say the model's path, slots and context, and
// its size.
func TestLlamaCppFactsFromRealReplies(t *testing.T) {
	props, err := os.Open(filepath.Join("testdata", "llamacpp_sweep_props.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer props.Close()
	p, err := ParseLlamaProps(props)
	if err != nil {
		t.Fatal(err)
	}
	if p.ModelPath != "/var/cache/tpsmon-ci/llama-server-3.21.1/tiny.gguf" || p.Slots != 8 || p.NCtx != 1024 {
		t.Errorf("/props: %+v", p)
	}
	models, err := os.Open(filepath.Join("testdata", "llamacpp_sweep_models.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer models.Close()
	m, err := ParseLlamaModels(models)
	if err != nil {
		t.Fatal(err)
	}
	if m.Params != 19794176 || m.SizeBytes != 79176704 || m.NEmbd != 256 || m.NVocab != 32000 || m.NCtxTrain != 4096 {
		t.Errorf("/v1/models meta: %+v", m)
	}
	for _, bad := range []string{`{"data":[{"meta":{"n_params":-1}}]}`, `{"data":`} {
		if _, err := ParseLlamaModels(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if m, err := ParseLlamaModels(strings.NewReader(`{"data":[{"id":"x"}]}`)); err != nil || m.Said() {
		t.Errorf("no meta: %+v, %v; want nothing said", m, err)
	}
}

func TestVLLMFacts(t *testing.T) {
	e, ok := CacheConfigInfo([]byte(readFixture(t, "vllm_v1_steps_cache_written.prom")))
	if !ok || e.KVTokens != 27000*16 || e.KVTokensFrom != "cache_config_info" || e.KVDtype != "fp8_e4m3" {
		t.Errorf("cache_config_info: %+v, %v", e, ok)
	}
	if _, ok := CacheConfigInfo([]byte(readFixture(t, "v1_two_engines.prom"))); ok {
		t.Error("a page without cache_config_info said one")
	}
	if e, _ := CacheConfigInfo([]byte(`vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="None"} 1`)); e.Said() {
		t.Errorf("no blocks, dtype auto: %+v, want nothing said", e)
	}
	// vLLM's start-up lines, in its V0 and V1 formats.
	lines := []struct {
		line string
		want EngineFacts
	}{
		{"INFO 03-01 10:00:00 model_runner.py:1071] Model loading took 14.9888 GiB and 4.102 seconds", EngineFacts{WeightBytesPerGPU: 14.9888 * (1 << 30)}},
		{"(Worker_TP0 pid=2412213) INFO 12-11 00:06:20 [gpu_model_runner.py:2338] Model loading took 7.5 GiB memory and 25.3 seconds", EngineFacts{WeightBytesPerGPU: 7.5 * (1 << 30)}},
		{"(EngineCore_DP0 pid=2412130) INFO 12-11 00:06:53 [kv_cache_utils.py:1286] GPU KV cache size: 686,320 tokens", EngineFacts{KVTokens: 686320, KVTokensFrom: "log"}},
		{"INFO 12-11 00:06:54 [kv_cache_utils.py:1291] Maximum concurrency for 100,000 tokens per request: 6.86x", EngineFacts{}},
	}
	for _, l := range lines {
		var e EngineFacts
		said := VLLMFactLine(l.line, &e)
		if e != l.want || said != l.want.Said() {
			t.Errorf("%q: %+v (%v), want %+v", l.line, e, said, l.want)
		}
	}
}

// The scraper asks llama-server for its facts with the first scrape, and
// hands them on once; a reply that does not change says nothing new.
func TestScrapeTellsEngineFacts(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("llamacpp:tokens_predicted_total 10\nllamacpp:requests_processing 1\n"))
	})
	for path, file := range map[string]string{"/props": "llamacpp_sweep_props.json", "/v1/models": "llamacpp_sweep_models.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { w.Write(b) })
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	now := time.Unix(1000, 0)
	s := &Scraper{Server: "s", URL: srv.URL + "/metrics", Interval: time.Second, Client: NewClient(5 * time.Second), Now: func() time.Time { return now }}
	r := s.Scrape(context.Background())
	if r.Err != nil || r.Facts == nil || r.Facts.ModelPath == "" || r.Facts.Params != 19794176 || r.Facts.Slots != 8 {
		t.Fatalf("first scrape: %v, facts %+v", r.Err, r.Facts)
	}
	for _, step := range []time.Duration{time.Second, modelEvery} {
		now = now.Add(step)
		if r := s.Scrape(context.Background()); r.Err != nil || r.Facts != nil {
			t.Errorf("after %v: %v, facts %+v; want none new", step, r.Err, r.Facts)
		}
	}
}

// The start-up lines in which vLLM and SGLang name the model they load,
// in their formats across versions (testdata, each line with its source):
// the model as given, the line that said it, and the revision and
// download directory said with it. A None, a cut line or a line that
// names no path says nothing; an escape is kept for the reader to refuse.
func TestLoggedModelLines(t *testing.T) {
	const (
		v1   = "vLLM engine config"
		args = "vLLM non-default args"
	)
	want := []EngineFacts{
		{LoggedModel: "/workspace/models/models--Qwen--Qwen2-0.5B", LoggedModelFrom: v1},
		{LoggedModel: "/home/cmq/.cache/huggingface/hub/models--facebook--opt-125m/snapshots/27dcfa74d334bc871f3234de431e71c6eeba5dd6", LoggedModelFrom: v1},
		{LoggedModel: "/mnt/tenant-home_speed/Model/Qwen/Qwen2.5-7B-Instruct", LoggedModelFrom: v1},
		{LoggedModel: "google/gemma-3-1b-it", LoggedModelFrom: v1},
		{LoggedModel: "/mnt/models", LoggedModelFrom: v1},
		{LoggedModel: "/home/EvilCalf/PULSE/PULSE-7bv5/", LoggedModelFrom: v1},
		{LoggedModel: "Qwen/Qwen2.5-0.5B-Instruct", LoggedModelFrom: args},
		{LoggedModel: "meta-llama/Llama-3.2-1B-Instruct", LoggedModelFrom: "vLLM args"},
		{LoggedModel: "/mnt/data/Qwen3-Coder-30B-A3B-Instruct/", LoggedModelFrom: "SGLang server_args"},
		{LoggedModel: "meta-llama/Llama-3.1-8B-Instruct", LoggedModelFrom: args, LoggedRevision: "0e9e39f249a16976918f6564b8830bc894c89659", LoggedDownloadDir: "/data/hf"},
		{LoggedModel: "/models/o'neil-7b", LoggedModelFrom: v1},
		{LoggedModel: `/models/it\'s`, LoggedModelFrom: v1},
		{}, {}, {},
	}
	var lines []string
	for _, l := range strings.Split(readFixture(t, "vllm_sglang_model_lines.log"), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines in the fixture, %d expected", len(lines), len(want))
	}
	for i, l := range lines {
		var e EngineFacts
		said := VLLMFactLine(l, &e)
		if e != want[i] || said != want[i].Said() {
			t.Errorf("line %d %.90q…:\n got %+v (%v)\nwant %+v", i+1, l, e, said, want[i])
		}
	}
}

// Whatever a start-up line holds, reading it ends, and a model it says is
// a value between matching quotes of at most maxLoggedValue bytes.
func FuzzStartupLine(f *testing.F) {
	for _, l := range strings.Split(readFixture(f, "vllm_sglang_model_lines.log"), "\n") {
		f.Add(l)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var e EngineFacts
		VLLMFactLine(line, &e)
		if len(e.LoggedModel) > maxLoggedValue || (e.LoggedModel != "" && !strings.Contains(line, e.LoggedModel)) {
			t.Errorf("%q: model %q", line, e.LoggedModel)
		}
	})
}
