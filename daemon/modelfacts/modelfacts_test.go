package modelfacts

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/analysis/modelfile"
	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sample"
)

var tinyGGUF = filepath.Join("..", "..", "analysis", "modelfile", "testdata", "tiny-q4.gguf")

func TestServerFacts(t *testing.T) {
	r, err := Server(config.ServerConfig{Name: "a", ModelFile: tinyGGUF,
		Roofline: config.RooflineConfig{PeakBWGBps: 20, KVTokens: 4096, Speculative: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	if r.GPU.PeakBWGBps != 20 || r.KVTokens != 4096 || r.TokensPerStep != 1.5 || r.Model.Layers != 2 || r.Model.KVBytes != 2 || r.Model.WeightBytes == 0 {
		t.Errorf("%+v", r)
	}
	r, err = Server(config.ServerConfig{ModelFile: tinyGGUF, Roofline: config.RooflineConfig{GPU: "L40S", KVBytes: 1}})
	if err != nil || r.GPU.PeakBWGBps != 864 || r.Model.KVBytes != 1 {
		t.Errorf("%+v %v", r, err)
	}
	for name, c := range map[string]struct {
		s    config.ServerConfig
		want string
	}{
		"no model file": {config.ServerConfig{}, "model_file"},
		"missing file":  {config.ServerConfig{ModelFile: "nope.gguf"}, "nope.gguf"},
		"config only":   {config.ServerConfig{ModelFile: filepath.Join("..", "..", "analysis", "modelfile", "testdata", "llama3-8b.config.json")}, "parameter count"},
	} {
		_, err := Server(c.s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it naming %q", name, err, c.want)
		}
	}
	if _, err := Server(config.ServerConfig{ModelFile: "nope.gguf"}); !errors.Is(err, modelfile.ErrBadFile) {
		t.Errorf("missing file: %v", err)
	}
	facts, missing := Servers(&config.Config{Servers: []config.ServerConfig{{Name: "a", ModelFile: tinyGGUF}, {Name: "b"}}})
	if facts["a"].Roofline == nil || missing["b"] == nil || len(facts) != 1 {
		t.Errorf("%v %v", facts, missing)
	}
}

func TestGPUPeaks(t *testing.T) {
	got, notes := GPUs([]sample.Device{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemBusWidthBits: 5120, MaxMemClockMHz: 2619},
		{Index: 1, Name: "NVIDIA A100-SXM4-80GB", MemBusWidthBits: 5120, MaxMemClockMHz: 1400}, // 1792: >5 % off
		{Index: 2, Name: "NVIDIA RTX PRO 6000 Blackwell", MemBusWidthBits: 512, MaxMemClockMHz: 14001},
		{Index: 3, Name: "Some GPU"},
	})
	if got["0"].BWGBps != 3350 || got["1"].BWGBps != 2039 || got["2"].BWGBps < 1792 || got["2"].BWGBps > 1793 {
		t.Errorf("%+v", got)
	}
	if _, ok := got["3"]; ok {
		t.Error("a GPU without a peak got one")
	}
	all := strings.Join(notes, "|")
	for _, w := range []string{"using the table", "not in the table", "GPU 3"} {
		if !strings.Contains(all, w) {
			t.Errorf("notes %q lack %q", all, w)
		}
	}
	if strings.Contains(all, "H100") {
		t.Errorf("H100 within 5 %% noted: %s", all)
	}
}

// The facts keys stand for a model file (a remote server's model).
func TestServerFactsFromKeys(t *testing.T) {
	r, err := Server(config.ServerConfig{Roofline: config.RooflineConfig{ParamsB: 70.55, BytesPerWeight: 0.53,
		EmbedParamsB: 1.05, Layers: 80, KVHeads: 8, HeadDim: 128, KVBytes: 1, GPU: "H100 SXM"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model.Params != 70.55e9 || r.Model.EmbedParams != 1.05e9 || r.Model.KVBytesPerToken() != 2*80*8*128 || r.GPU.PeakBWGBps != 3350 {
		t.Errorf("%+v", r)
	}
	// Keys over a file: named parameters replace its count, keep its bytes per parameter.
	r, err = Server(config.ServerConfig{ModelFile: tinyGGUF, Roofline: config.RooflineConfig{ParamsB: 1, Layers: 9}})
	if err != nil || r.Model.Params != 1e9 || r.Model.WeightBytes != 0 || r.Model.BytesPerWeight <= 0 || r.Model.Layers != 9 {
		t.Errorf("%+v %v", r, err)
	}
	if _, err := Server(config.ServerConfig{Roofline: config.RooflineConfig{ParamsB: 7, ActiveParamsB: 9}}); err == nil {
		t.Error("active above total accepted")
	}
}

// The engine's facts fill what the configuration leaves out, fact by
// fact, and the source says which were the engine's.
func TestWithEngine(t *testing.T) {
	sweep := collector.EngineFacts{ModelPath: "/nonexistent/tiny.gguf", NCtx: 1024, Slots: 8, // the real sweep's /props and /v1/models
		Params: 19794176, SizeBytes: 79176704, NEmbd: 256, NVocab: 32000, NCtxTrain: 4096}
	cases := []struct {
		name string
		s    config.ServerConfig
		e    collector.EngineFacts
		want func(*roofline.Server) bool
		src  []string
	}{
		{"model path readable", config.ServerConfig{}, collector.EngineFacts{ModelPath: tinyGGUF, Params: 1},
			func(r *roofline.Server) bool { return r.Model.Layers == 2 && r.Model.WeightBytes > 0 }, []string{"/props model_path " + tinyGGUF}},
		{"meta only", config.ServerConfig{}, sweep,
			func(r *roofline.Server) bool {
				// The real GGUF streams (19794176 − 256 × 32000) × 4 bytes.
				return r.Model.Params == 19794176 && r.Model.BytesPerWeight == 4 && r.Model.EmbedParams == 256*32000 && !r.Model.HasKV()
			}, []string{"/v1/models meta", "not readable here", "KV is not counted", "n_embd × n_vocab = 8.192e+06 not streamed"}},
		{"configuration wins", config.ServerConfig{ModelFile: tinyGGUF, Roofline: config.RooflineConfig{KVTokens: 4096, KVBytes: 2}},
			collector.EngineFacts{ModelPath: "/other.gguf", Params: 7e9, KVTokens: 999, KVTokensFrom: "log", KVDtype: "fp8"},
			func(r *roofline.Server) bool {
				return r.Model.Layers == 2 && r.KVTokens == 4096 && r.Model.KVBytes == 2
			}, []string{"model from the configuration"}},
		{"vLLM fills KV and bytes", config.ServerConfig{GPUs: []string{"0", "1"}, Roofline: config.RooflineConfig{ParamsB: 8, Layers: 32, KVHeads: 8, HeadDim: 128}},
			collector.EngineFacts{WeightBytesPerGPU: 7.5 * (1 << 30), KVTokens: 686320, KVTokensFrom: "log", KVDtype: "fp8_e4m3"},
			func(r *roofline.Server) bool {
				return r.KVTokens == 686320 && r.Model.KVBytes == 1 && abs(r.Model.BytesPerWeight-7.5*(1<<30)*2/8e9) < 1e-12
			}, []string{"Model loading took 7.50 GiB per GPU × 2", "KV capacity 686320 tokens from the engine (log)", "cache_dtype fp8_e4m3"}},
	}
	for _, c := range cases {
		r, src, err := WithEngine(c.s, c.e)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !c.want(r) {
			t.Errorf("%s: %+v", c.name, r.Model)
		}
		for _, w := range c.src {
			if !strings.Contains(src, w) {
				t.Errorf("%s: source %q lacks %q", c.name, src, w)
			}
		}
	}
	if _, _, err := WithEngine(config.ServerConfig{}, collector.EngineFacts{NCtx: 1024}); !errors.Is(err, ErrNoModel) || !strings.Contains(err.Error(), "the engine said") {
		t.Errorf("engine without a model: %v", err)
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}
