package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/syncbuf"
	"github.com/tpsmon/tpsmon/window"
)

type capture struct{ got []analysis.Closed }

func (c *capture) WriteWindows(cs []analysis.Closed) error {
	c.got = append(c.got, cs...)
	return nil
}

// The pipeline hands the analysis its servers' model facts (read at
// start) and the GPUs' peaks (told when the backend opens): a server with
// a model file gets mbu and ceiling_tps on its GPU's peak, one without is
// said once and gets neither.
func TestPipelineGivesTheCeilingItsFacts(t *testing.T) {
	var logs bytes.Buffer
	cfg := configtest.Private(t)
	cfg.Servers = []config.ServerConfig{
		{Name: "with", ModelFile: filepath.Join("..", "..", "analysis", "modelfile", "testdata", "tiny-q4.gguf")},
		{Name: "without"},
	}
	out := &capture{}
	p := testLoop(&pipeline{log: slog.New(slog.NewTextHandler(&logs, nil)), outputs: []WindowWriter{out}}, cfg, nil)
	p.setServerFacts(cfg)
	devicesMsg{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemBusWidthBits: 5120, MaxMemClockMHz: 2619}}.apply(p)
	w := func(name string) window.ServerWindow {
		return window.ServerWindow{Server: name, GPUs: []string{"0"}, Running: window.Some(2.0), SystemTPS: window.Some(100.0)}
	}
	p.emit([]window.Closed{{Start: time.Unix(1000, 0), Servers: []window.ServerWindow{w("with"), w("without")}}})
	if len(out.got) != 1 {
		t.Fatalf("%d windows", len(out.got))
	}
	s := out.got[0].Servers
	if !s[0].MBU.OK || !s[0].CeilingTPS.OK || s[0].MBU.V <= 0 || s[1].MBU.OK || s[1].CeilingTPS.OK {
		t.Errorf("with: %+v %+v; without: %+v %+v", s[0].MBU, s[0].CeilingTPS, s[1].MBU, s[1].CeilingTPS)
	}
	if n := strings.Count(logs.String(), "no decode ceiling"); n != 1 || !strings.Contains(logs.String(), "server=without") {
		t.Errorf("the server without facts said %d times:\n%s", n, logs.String())
	}
}

// A server without model facts in its configuration gets them from its
// engine: llama-server's /props model path (told with a scrape) is read,
// and its windows carry the ceiling from then on, the source logged once;
// a vLLM start-up line read from the log adds the KV capacity.
func TestEngineFactsGiveTheCeiling(t *testing.T) {
	var logs bytes.Buffer
	cfg := configtest.Private(t)
	cfg.Servers = []config.ServerConfig{{Name: "llama", GPUs: []string{"0"}}, {Name: "vllm", Engine: "vllm", GPUs: []string{"0"},
		Roofline: config.RooflineConfig{ParamsB: 8, Layers: 32, KVHeads: 8, HeadDim: 128}}}
	out := &capture{}
	p := testLoop(&pipeline{log: slog.New(slog.NewTextHandler(&logs, nil)), outputs: []WindowWriter{out}}, cfg, nil)
	p.setServerFacts(cfg)
	devicesMsg{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemBusWidthBits: 5120, MaxMemClockMHz: 2619}}.apply(p)
	w := window.ServerWindow{Server: "llama", GPUs: []string{"0"}, Running: window.Some(2.0), SystemTPS: window.Some(100.0)}
	p.emit([]window.Closed{{Start: time.Unix(1000, 0), Servers: []window.ServerWindow{w}}})
	if out.got[0].Servers[0].CeilingTPS.OK {
		t.Fatal("a ceiling before the engine said its model")
	}
	facts := collector.EngineFacts{ModelPath: filepath.Join("..", "..", "analysis", "modelfile", "testdata", "tiny-q4.gguf"), Slots: 8, NCtx: 1024}
	for range 2 {
		p.noteEngineFacts("llama", facts) // as a scrape that carries them does
	}
	p.emit([]window.Closed{{Start: time.Unix(1010, 0), Servers: []window.ServerWindow{w}}})
	if s := out.got[1].Servers[0]; !s.CeilingTPS.OK || s.CeilingTPS.V <= 0 {
		t.Errorf("after the engine's facts: ceiling %+v", s.CeilingTPS)
	}
	if n := strings.Count(logs.String(), "decode ceiling facts"); n != 1 || !strings.Contains(logs.String(), "/props model_path") {
		t.Errorf("the source said %d times:\n%s", n, logs.String())
	}

	var sent []message
	r, err := p.newLogReader(cfg.Servers[1], func(m message) { sent = append(sent, m) })
	if err != nil {
		t.Fatal(err)
	}
	r.line(tail.Line{Text: []byte("(EngineCore_DP0 pid=7) INFO 12-11 00:06:53 [kv_cache_utils.py:1286] GPU KV cache size: 686,320 tokens")})
	r.line(tail.Line{Text: []byte("INFO 12-11 00:06:54 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%")})
	// Once it serves, the other lines are not searched for them.
	r.line(tail.Line{Text: []byte("INFO 12-11 00:07:00 [kv_cache_utils.py:1286] GPU KV cache size: 1,000 tokens")})
	r.flush() // the read's facts go in one message
	var n int
	for _, m := range sent {
		if _, ok := m.(engineFactsMsg); ok {
			m.apply(p)
			n++
		}
	}
	if n != 1 || p.serverFacts["vllm"].Roofline == nil || p.serverFacts["vllm"].Roofline.KVTokens != 686320 {
		t.Errorf("%d facts messages; vllm facts %+v", n, p.serverFacts["vllm"].Roofline)
	}
	// A reload keeps what the engines said.
	p.setServerFacts(cfg)
	if p.serverFacts["llama"].Roofline == nil || p.serverFacts["vllm"].Roofline.KVTokens != 686320 {
		t.Errorf("after a reload: %+v", p.serverFacts)
	}
}

// A simulated vLLM that logs, as it starts, the model directory it loads
// (config.json and safetensors) and its KV capacity, and serves its
// metrics: the daemon reads the directory as it would a configured
// model_file, logs the source once, and every window that decoded gets
// mbu and ceiling_tps from the directory's real bytes and architecture
// and the logged KV capacity, on the configured peak.
func TestLoggedModelPathGivesTheCeiling(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model, err := filepath.Abs(filepath.Join("..", "modelfacts", "testdata", "tiny-llama"))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "vllm.log")
	var head bytes.Buffer
	const kvTokens = 1000
	if _, err := (vllmsim.Startup{Model: model, WeightsGiB: 0.0001, KVTokens: kvTokens, At: time.Now().UTC()}).WriteTo(&head); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, head.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&vllmsim.Driven{Rate: 100, Start: time.Now().Add(-time.Hour), ResetAt: time.Now().Add(time.Hour)})
	defer srv.Close()
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
	cfg.GPU.Backend = "none"
	const peakGBps = 0.01
	cfg.Servers = []config.ServerConfig{{Name: "vllm", Engine: "vllm", MetricsURL: srv.URL + "/metrics", Log: config.LogSourceConfig{File: logPath},
		GPUs: []string{"auto"}, ScrapeInterval: 100 * time.Millisecond, Roofline: config.RooflineConfig{PeakBWGBps: peakGBps, TP: 1}}}
	var out, logs syncbuf.Buffer
	a := newAgent(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(&out)}, Log: slog.New(slog.NewTextHandler(&logs, nil))},
		hooks{positionDir: filepath.Join(dir, "pos"), logPoll: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "decode ceiling facts"); n != 1 ||
		!strings.Contains(logs.String(), `model from the engine's log (vLLM engine config model \"`+model+`\")`) ||
		!strings.Contains(logs.String(), "KV capacity 1000 tokens from the engine (log)") {
		t.Errorf("the source said %d times:\n%s", n, logs.String())
	}
	// The directory streams 1448 parameters in 2896 bytes a step (the
	// untied input embedding is gathered) and keeps 2 × 2 layers × 2 KV
	// heads × 2 dims × 2 bytes = 32 bytes of KV a token; the simulator
	// runs 10 requests at half its KV: 10 × peak ÷ (2896 + 500 × 32).
	wantCeiling := 10 * peakGBps * 1e9 / (2896 + 0.5*kvTokens*32)
	var with int
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(l, "tpsmon_server,") {
			continue
		}
		f := lpFields(l)
		mbu, okM := f["mbu"]
		ceiling, okC := f["ceiling_tps"]
		if !okM || !okC {
			continue
		}
		with++
		if ceiling < wantCeiling*0.999 || ceiling > wantCeiling*1.001 {
			t.Errorf("ceiling_tps %g, want %g: %s", ceiling, wantCeiling, l)
		}
		// Memory bound, MBU × ceiling is the window's own rate.
		if got := mbu * ceiling; got < f["system_tps"]*0.999 || got > f["system_tps"]*1.001 || mbu <= 0 {
			t.Errorf("mbu %g × ceiling %g = %g, system_tps %g", mbu, ceiling, got, f["system_tps"])
		}
	}
	if with == 0 {
		t.Fatalf("no window with mbu and ceiling_tps:\n%s\nlog:\n%s", out.String(), logs.String())
	}
}

// lpFields are a line protocol line's numeric fields.
func lpFields(line string) map[string]float64 {
	out := map[string]float64{}
	parts := strings.Fields(line)
	if len(parts) < 2 {
		return out
	}
	for _, kv := range strings.Split(parts[1], ",") {
		k, v, _ := strings.Cut(kv, "=")
		if x, err := strconv.ParseFloat(strings.TrimSuffix(v, "i"), 64); err == nil {
			out[k] = x
		}
	}
	return out
}
