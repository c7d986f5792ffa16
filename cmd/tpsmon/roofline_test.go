package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sim/vllmsim"
)

func rooflineJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out, err := runCLI(t, append([]string{"roofline", "--format", "json"}, args...)...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	for _, k := range []string{"mbu", "ceiling_per_user_tps", "ceiling_system_tps", "bound", "peak_bw_gbps", "warnings"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%v: no %s in %s", args, k, out)
		}
	}
	return m
}

func TestRooflineCommand(t *testing.T) {
	// Llama-2-7B FP16 on an A100 SXM 80GB: 13.5 GB a step at 2039 GB/s.
	m := rooflineJSON(t, "--params-b", "6.74", "--gpu", "A100-SXM4-80GB", "--per-user-tps", "100")
	if got := m["ceiling_per_user_tps"].(float64); math.Abs(got-2039/13.48) > 0.1 {
		t.Errorf("ceiling %g", got)
	}
	if got := m["mbu"].(float64); math.Abs(got-13.48*100/2039) > 1e-3 {
		t.Errorf("mbu %g", got)
	}
	// --tpot is the same measurement; speculation divides the steps.
	a := rooflineJSON(t, "--params-b", "8", "--gpu", "h100 pcie", "--tpot", "10ms", "--speculative", "2")
	if a["measured_steps_per_s"].(float64) != 50 || a["bound"] != "memory" {
		t.Errorf("%v", a)
	}
	// Without a measurement mbu is null, the ceiling still there.
	n := rooflineJSON(t, "--params-b", "70", "--tp", "4", "--gpu", "H100 SXM", "--batch", "64", "--context", "4096",
		"--layers", "80", "--kv-heads", "8", "--head-dim", "128", "--kv-bytes", "1")
	if n["mbu"] != nil || n["kv_bytes_per_step"].(float64) != 64*4096*2*80*2*128 {
		t.Errorf("%v", n)
	}
	// MBU above 1 is printed as it is, with the cause.
	o := rooflineJSON(t, "--params-b", "8", "--peak-bw-gbps", "1000", "--per-user-tps", "100")
	if o["mbu"].(float64) <= 1 || !strings.Contains(strings.Join(toStrings(o["warnings"]), "|"), "speculative") {
		t.Errorf("%v", o)
	}
}

func toStrings(v any) []string {
	var s []string
	for _, x := range v.([]any) {
		s = append(s, x.(string))
	}
	return s
}

func TestRooflineModelFiles(t *testing.T) {
	cfg := filepath.Join("..", "..", "analysis", "modelfile", "testdata", "mixtral-8x7b.config.json")
	// Mixtral: experts from config.json, the counts from the flags.
	m := rooflineJSON(t, "--model-config", cfg, "--params-b", "46.7", "--active-params-b", "12.9", "--gpu", "H100 SXM", "--batch", "1")
	if m["experts_read_per_layer"].(float64) != 2 || m["model_source"] != "config.json" {
		t.Errorf("%v", m)
	}
	// The embedding config.json names (32000 × 4096) is not streamed.
	if got := m["streamed_params"].(float64); got != 46.7e9-32000*4096 {
		t.Errorf("streamed %g", got)
	}
}

func TestRooflineRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.gguf")
	os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00"), 0o600)
	cases := []struct {
		args []string
		says string
	}{
		{[]string{"--params-b", "NaN", "--gpu", "L40S"}, "--params-b"},
		{[]string{"--params-b", "-7", "--gpu", "L40S"}, "--params-b"},
		{[]string{"--params-b", "7", "--gpu", "H100"}, "ambiguous"},
		{[]string{"--params-b", "7", "--gpu", "MI300X"}, "not in the built-in table"},
		{[]string{"--params-b", "7"}, "--gpu"},
		{[]string{"--gpu", "L4"}, "--params-b"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--batch", "0"}, "batch"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--tp", "-1"}, "--tp"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--context", "100"}, "layers"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--tpot", "fast"}, "--tpot"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--tpot", "-5"}, "--tpot"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--tpot", "5", "--per-user-tps", "3"}, "give one"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--speculative", "0.5"}, "tokens per step"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--bytes-per-weight", "16"}, "not bits"},
		{[]string{"--params-b", "7e9", "--gpu", "L4"}, "billions"},
		{[]string{"--params-b", "7", "--peak-bw-gbps", "Inf"}, "--peak-bw-gbps"},
		{[]string{"--params-b", "7", "--gpu", "L4", "--format", "xml"}, "--format"},
		{[]string{"--model-file", bad, "--gpu", "L4"}, "truncated"},
		{[]string{"--model-file", filepath.Join(dir, "none.gguf"), "--gpu", "L4"}, "none.gguf"},
	}
	for _, c := range cases {
		out, err := runCLI(t, append([]string{"roofline"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v (%s), want an error naming %q", c.args, err, out, c.says)
		}
	}
}

// check says, per server, whether its windows will carry the ceiling and
// which fact is missing where not; a broken model file is a problem.
func TestCheckNamesTheMissingCeilingFact(t *testing.T) {
	srv := httptest.NewServer(&vllmsim.Driven{Rate: 10, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	defer srv.Close()
	gguf := filepath.Join("..", "..", "analysis", "modelfile", "testdata", "tiny-q4.gguf")
	write := func(extra string) string {
		p := filepath.Join(t.TempDir(), "tpsmon.yaml")
		os.WriteFile(p, []byte(fmt.Sprintf(`gpu: {backend: none}
servers:
  - name: with
    metrics_url: %[1]s/metrics
    model_file: %[2]s
    roofline: {peak_bw_gbps: 20, kv_tokens: 4096}
  - name: without
    metrics_url: %[1]s/metrics
  - name: nogpu
    metrics_url: %[1]s/metrics
    model_file: %[2]s
%[3]s`, srv.URL, gguf, extra)), 0o600)
		return p
	}
	out, err := runCLI(t, "check", "-c", write(""))
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"ok    server with: decode ceiling from " + gguf,
		"peak 20 GB/s",
		"note  server without: no decode ceiling (mbu, ceiling_tps): no model facts: set servers[].model_file",
		"note  server nogpu: no decode ceiling (mbu, ceiling_tps): no GPU peak",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "check", "-c", write("  - name: broken\n    metrics_url: "+srv.URL+"/metrics\n    model_file: /nonexistent.gguf\n"))
	if err == nil || !strings.Contains(out, "FAIL  server broken: model_file:") || !strings.Contains(out, "/nonexistent.gguf") {
		t.Errorf("broken model file: %v\n%s", err, out)
	}
}

// check says when the ceiling's model comes from the engine: a
// llama-server whose /props names a GGUF readable here, and a vLLM whose
// page's cache_config_info and log's start-up lines give the KV.
func TestCheckSaysTheEngineGaveTheFacts(t *testing.T) {
	gguf := filepath.Join("..", "..", "analysis", "modelfile", "testdata", "tiny-q4.gguf")
	abs, _ := filepath.Abs(gguf)
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("llamacpp:tokens_predicted_total 10\nllamacpp:requests_processing 1\n"))
	})
	mux.HandleFunc("/props", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"default_generation_settings":{"n_ctx":1024},"total_slots":8,"model_path":%q}`, abs)
	})
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"data":[{"id":"tiny"}]}`)) })
	llama := httptest.NewServer(mux)
	defer llama.Close()
	page, err := os.ReadFile(filepath.Join("..", "..", "collector", "testdata", "vllm_v1_steps_cache_written.prom"))
	if err != nil {
		t.Fatal(err)
	}
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(page) }))
	defer vllm.Close()
	log := filepath.Join(t.TempDir(), "vllm.log")
	os.WriteFile(log, []byte("INFO 12-11 00:06:53 [kv_cache_utils.py:1286] GPU KV cache size: 686,320 tokens\n"), 0o600)
	p := filepath.Join(t.TempDir(), "tpsmon.yaml")
	os.WriteFile(p, []byte(fmt.Sprintf(`gpu: {backend: none}
servers:
  - name: llama
    engine: llamacpp
    metrics_url: %s/metrics
    roofline: {peak_bw_gbps: 20}
  - name: vllm
    engine: vllm
    metrics_url: %s/metrics
    log: {file: %s}
    roofline: {peak_bw_gbps: 3350, params_b: 8, layers: 32, kv_heads: 8, head_dim: 128}
`, llama.URL, vllm.URL, log)), 0o600)
	out, err := runCLI(t, "check", "-c", p)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		"ok    server llama: decode ceiling from model from the engine (/props model_path " + abs + ")",
		"ok    server vllm: decode ceiling from servers[].roofline (model from the configuration; KV capacity 686320 tokens from the engine (log); KV element 1 bytes from the engine (cache_dtype fp8_e4m3))",
		"KV counted from its occupancy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}

// check names the model a vLLM server logged as the ceiling's source
// where it reads it (a model directory), and says why not where it does
// not (a repo id in no hub cache searched): no ceiling, the reason said.
func TestCheckSaysTheLoggedModel(t *testing.T) {
	model, _ := filepath.Abs(filepath.Join("..", "..", "daemon", "modelfacts", "testdata", "tiny-llama"))
	page, err := os.ReadFile(filepath.Join("..", "..", "collector", "testdata", "vllm_v1_steps_cache_written.prom"))
	if err != nil {
		t.Fatal(err)
	}
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(page) }))
	defer vllm.Close()
	dir, hub := t.TempDir(), t.TempDir()
	logLine := func(m string) string {
		return "(EngineCore_DP0 pid=7) INFO 12-11 00:06:40 [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config: model='" + m +
			"', speculative_config=None, tokenizer='" + m + "', revision=None, download_dir=None, load_format=auto\n" +
			"(EngineCore_DP0 pid=7) INFO 12-11 00:06:53 [kv_cache_utils.py:1286] GPU KV cache size: 4,000 tokens\n"
	}
	local, repo := filepath.Join(dir, "local.log"), filepath.Join(dir, "repo.log")
	os.WriteFile(local, []byte(logLine(model)), 0o600)
	os.WriteFile(repo, []byte(logLine("meta-llama/Llama-3.1-8B-Instruct")), 0o600)
	p := filepath.Join(dir, "tpsmon.yaml")
	os.WriteFile(p, []byte(fmt.Sprintf(`gpu: {backend: none}
servers:
  - name: vlocal
    engine: vllm
    metrics_url: %[1]s/metrics
    log: {file: %[2]s}
    roofline: {peak_bw_gbps: 3350}
  - name: vrepo
    engine: vllm
    metrics_url: %[1]s/metrics
    log: {file: %[3]s}
    roofline: {peak_bw_gbps: 3350, hf_hub_dirs: [%[4]s]}
`, vllm.URL, local, repo, hub)), 0o600)
	out, err := runCLI(t, "check", "-c", p)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	for _, want := range []string{
		`ok    server vlocal: decode ceiling from model from the engine's log (vLLM engine config model "` + model + `"); KV capacity 4000 tokens from the engine (log)`,
		"(1.45e+03 parameters streamed, 2.9e-06 GB)",
		`note  server vrepo: no decode ceiling (mbu, ceiling_tps): no model facts`,
		`vLLM engine config "meta-llama/Llama-3.1-8B-Instruct"): a Hugging Face repo id in no hub cache searched (` + hub,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
}
