package roofline

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func near(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if math.Abs(got-want) > rel*math.Abs(want) {
		t.Errorf("%s = %.6g, want %.6g (±%g%%)", what, got, want, rel*100)
	}
}

// Llama-2-7B in FP16 on one A100 SXM 80GB at batch 1, no context: every
// step reads the 6.74 B parameters less the 131 M input embedding, 2 bytes
// each: 13.22 GB at 2039 GB/s is 154 steps/s.
func TestDenseBatchOne(t *testing.T) {
	m := Model{Params: 6.74e9, BytesPerWeight: 2, EmbedParams: 0.131e9}
	g := GPU{PeakBWGBps: 2039, PeakTFLOPS: 312}
	c, err := Compute(m, g, Load{TP: 1, Batch: 1, TokensPerStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "bytes", c.Bytes, 13.218e9, 1e-4)
	near(t, "per-user", c.PerUserTPS, 2039e9/13.218e9, 1e-4)
	if c.Bound != BoundMemory || c.SystemTPS != c.PerUserTPS {
		t.Errorf("bound %s system %g", c.Bound, c.SystemTPS)
	}
}

// The KV of Llama-3-8B (32 layers, 8 KV heads × 128, BF16) is 128 KiB a
// token; TP 2 halves it, TP 16 keeps one head per GPU (replicated).
func TestKVAndTP(t *testing.T) {
	m := Model{Params: 8e9, BytesPerWeight: 2, Layers: 32, KVHeads: 8, HeadDim: 128, KVBytes: 2}
	if got := m.KVBytesPerToken(); got != 131072 {
		t.Fatalf("kv per token %g", got)
	}
	g := GPU{PeakBWGBps: 1000}
	for _, c := range []struct {
		tp        int
		perTok    float64
		replicate bool
	}{{1, 131072, false}, {2, 65536, false}, {8, 16384, false}, {16, 16384, true}} {
		r, err := Compute(m, g, Load{TP: c.tp, Batch: 4, Context: 1000, TokensPerStep: 1})
		if err != nil {
			t.Fatal(err)
		}
		near(t, "kv bytes", r.KVBytes, 4*1000*c.perTok, 1e-9)
		near(t, "weight bytes", r.WeightBytes, 16e9/float64(c.tp), 1e-9)
		warned := strings.Contains(strings.Join(r.Warnings, "|"), "replicated")
		if warned != c.replicate {
			t.Errorf("tp %d: replication warning %v", c.tp, warned)
		}
	}
	m.KVReplicated = true
	r, _ := Compute(m, g, Load{TP: 8, Batch: 1, Context: 1, TokensPerStep: 1})
	near(t, "replicated kv", r.KVBytes, 131072, 1e-9)
}

// Mixtral-8x7B: 46.7 B total, 12.9 B active, 8 experts, 2 a token. At
// batch 1 a step reads the active parameters; at batch 64 nearly all.
func TestMoEExpertsTouched(t *testing.T) {
	m := Model{Params: 46.7e9, ActiveParams: 12.9e9, BytesPerWeight: 2, Experts: 8, ExpertsUsed: 2}
	g := GPU{PeakBWGBps: 1000}
	one, _ := Compute(m, g, Load{TP: 1, Batch: 1, TokensPerStep: 1})
	near(t, "batch 1 bytes", one.WeightBytes, 2*12.9e9, 1e-9)
	near(t, "batch 1 experts", one.ExpertsRead, 2, 1e-9)
	four, _ := Compute(m, g, Load{TP: 1, Batch: 4, TokensPerStep: 1})
	near(t, "batch 4 experts", four.ExpertsRead, 8*(1-math.Pow(0.75, 4)), 1e-9)
	big, _ := Compute(m, g, Load{TP: 1, Batch: 64, TokensPerStep: 1})
	if big.WeightBytes > 2*46.7e9 || big.WeightBytes < 0.999*2*46.7e9 {
		t.Errorf("batch 64 bytes %g, want ≈ all %g", big.WeightBytes, 2*46.7e9)
	}
	// Without expert counts: active only, and warned above batch 1.
	m.Experts, m.ExpertsUsed = 0, 0
	nc, _ := Compute(m, g, Load{TP: 1, Batch: 8, TokensPerStep: 1})
	near(t, "no counts bytes", nc.WeightBytes, 2*12.9e9, 1e-9)
	if !strings.Contains(strings.Join(nc.Warnings, "|"), "lower bound") {
		t.Errorf("no MoE warning: %v", nc.Warnings)
	}
}

// A 7B model at batch 1024 on an A100 is compute-bound: 2 × 7e9 × 1024
// FLOPs at 312 TFLOPS is 46 ms, the 14 GB read 7 ms.
func TestComputeBound(t *testing.T) {
	m := Model{Params: 7e9, BytesPerWeight: 2}
	g := GPU{PeakBWGBps: 2039, PeakTFLOPS: 312}
	c, err := Compute(m, g, Load{TP: 1, Batch: 1024, TokensPerStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c.Bound != BoundCompute {
		t.Fatalf("bound %s", c.Bound)
	}
	near(t, "steps/s", c.StepsPerS, 312e12/(2*7e9*1024), 1e-9)
	small, _ := Compute(m, g, Load{TP: 1, Batch: 8, TokensPerStep: 1})
	if small.Bound != BoundMemory {
		t.Fatalf("batch 8 bound %s", small.Bound)
	}
}

func TestSpeculativeTokensAreNotSteps(t *testing.T) {
	m := Model{Params: 8e9, BytesPerWeight: 2}
	g := GPU{PeakBWGBps: 3350}
	// 16 GB at 3350 GB/s: 209 steps/s. A measured 300 tok/s is MBU 1.43
	// without speculation, named as the likely cause; with 2.5 tokens per
	// step it is 120 steps/s, MBU 0.57.
	plain, err := Measure(m, g, Load{TP: 1, Batch: 1, TokensPerStep: 1}, 300)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "plain mbu", plain.MBU, 16e9*300/3350e9, 1e-9)
	if len(plain.Warnings) == 0 || !strings.Contains(plain.Warnings[len(plain.Warnings)-1], "likely: speculative decoding") {
		t.Errorf("MBU>1 warning: %v", plain.Warnings)
	}
	spec, _ := Measure(m, g, Load{TP: 1, Batch: 1, TokensPerStep: 2.5}, 300)
	near(t, "spec steps", spec.MeasuredStepsPerS, 120, 1e-9)
	near(t, "spec mbu", spec.MBU, 16e9*120/3350e9, 1e-9)
	near(t, "spec ceiling", spec.PerUserTPS, 2.5*3350e9/16e9, 1e-9)
	for _, w := range spec.Warnings {
		if strings.Contains(w, "MBU") {
			t.Errorf("warned below 1: %s", w)
		}
	}
}

func TestBadInputIsRefused(t *testing.T) {
	good := Model{Params: 7e9, BytesPerWeight: 2, Layers: 32, KVHeads: 8, HeadDim: 128, KVBytes: 2}
	gpu := GPU{PeakBWGBps: 1000, PeakTFLOPS: 100}
	load := Load{TP: 1, Batch: 1, Context: 100, TokensPerStep: 1}
	nan := math.NaN()
	cases := []struct {
		name string
		m    func(*Model)
		g    func(*GPU)
		l    func(*Load)
		says string
	}{
		{"nan params", func(m *Model) { m.Params = nan }, nil, nil, "params"},
		{"negative params", func(m *Model) { m.Params = -1 }, nil, nil, "params"},
		{"params as bytes", func(m *Model) { m.Params = 7e15 }, nil, nil, "billions"},
		{"bits not bytes", func(m *Model) { m.BytesPerWeight = 16 }, nil, nil, "not bits"},
		{"inf bytes", func(m *Model) { m.BytesPerWeight = math.Inf(1) }, nil, nil, "bytes per weight"},
		{"active above total", func(m *Model) { m.ActiveParams = 8e9 }, nil, nil, "exceed"},
		{"experts without active", func(m *Model) { m.Experts, m.ExpertsUsed = 8, 2 }, nil, nil, "active parameter"},
		{"experts half given", func(m *Model) { m.Experts = 8 }, nil, nil, "give both"},
		{"zero layers with context", func(m *Model) { m.Layers = 0 }, nil, nil, "layers"},
		{"kv bits", func(m *Model) { m.KVBytes = 16 }, nil, nil, "not bits"},
		{"nan bw", nil, func(g *GPU) { g.PeakBWGBps = nan }, nil, "bandwidth"},
		{"zero bw", nil, func(g *GPU) { g.PeakBWGBps = 0 }, nil, "bandwidth"},
		{"negative tflops", nil, func(g *GPU) { g.PeakTFLOPS = -1 }, nil, "TFLOPS"},
		{"tp 0", nil, nil, func(l *Load) { l.TP = 0 }, "tp"},
		{"batch 0", nil, nil, func(l *Load) { l.Batch = 0 }, "batch"},
		{"nan context", nil, nil, func(l *Load) { l.Context = nan }, "context"},
		{"spec below 1", nil, nil, func(l *Load) { l.TokensPerStep = 0.5 }, "tokens per step"},
		{"huge batch", nil, nil, func(l *Load) { l.Batch = 1e9 }, "batch"},
	}
	for _, c := range cases {
		m, g, l := good, gpu, load
		if c.m != nil {
			c.m(&m)
		}
		if c.g != nil {
			c.g(&g)
		}
		if c.l != nil {
			c.l(&l)
		}
		_, err := Compute(m, g, l)
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.says)
		}
	}
	if _, err := Measure(good, gpu, load, nan); !errors.Is(err, ErrInput) {
		t.Errorf("nan measured rate: %v", err)
	}
	// Without context the KV facts are not needed.
	if _, err := Compute(Model{Params: 1e9, BytesPerWeight: 1}, gpu, Load{TP: 1, Batch: 1, TokensPerStep: 1}); err != nil {
		t.Errorf("no context, no KV facts: %v", err)
	}
}

func TestNoTFLOPSWarned(t *testing.T) {
	c, err := Compute(Model{Params: 1e9, BytesPerWeight: 2}, GPU{PeakBWGBps: 600}, Load{TP: 1, Batch: 1, TokensPerStep: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c.ComputeS != 0 || c.Bound != BoundMemory || !strings.Contains(strings.Join(c.Warnings, "|"), "compute bound is not checked") {
		t.Errorf("%+v", c)
	}
}

func TestLiveWindow(t *testing.T) {
	s := Server{Model: Model{Params: 8e9, BytesPerWeight: 2, Layers: 32, KVHeads: 8, HeadDim: 128, KVBytes: 2},
		GPU: GPU{PeakBWGBps: 3350, PeakTFLOPS: 989}, TP: 1, KVTokens: 100000}
	// 4 running at half a 100k-token cache: 12.5k tokens each, 6.55 GB of
	// KV and 16 GB of weights a step. 400 tokens/s is 100 steps/s.
	l, ok := LiveWindow(s, Window{Running: 4, SystemTPS: 400, KVUsage: 0.5, StepsPerS: -1})
	if !ok || !l.KVCounted {
		t.Fatalf("%+v %v", l, ok)
	}
	bytes := 16e9 + 50000*131072.0
	near(t, "mbu", l.MBU, bytes*100/3350e9, 1e-9)
	near(t, "ceiling", l.CeilingTPS, 4*3350e9/bytes, 1e-9)
	// The engine's own step count wins over tokens ÷ running.
	l, _ = LiveWindow(s, Window{Running: 4, SystemTPS: 400, KVUsage: 0.5, StepsPerS: 120})
	near(t, "engine steps mbu", l.MBU, bytes*120/3350e9, 1e-9)
	// A window the server spent mostly idle: its gauges' mean reads 0.2
	// running, but its 124 steps/s made 124 tokens/s, one sequence a step.
	// The ceiling is that of the batch the steps decoded, so never below
	// the tokens they made (at 0.2 sequences it read 113 tok/s live).
	l, _ = LiveWindow(s, Window{Running: 0.2, SystemTPS: 124, KVUsage: -1, StepsPerS: 124})
	near(t, "idle window's ceiling", l.CeilingTPS, 3350e9/16e9, 1e-9)
	if l.CeilingTPS < 124 {
		t.Errorf("idle window: ceiling %v below the 124 tok/s its steps made", l.CeilingTPS)
	}
	near(t, "idle window's mbu", l.MBU, 16e9*124/3350e9, 1e-9)
	// KV occupancy unknown: weights only, said.
	l, ok = LiveWindow(s, Window{Running: 4, SystemTPS: 400, KVUsage: -1, StepsPerS: -1})
	if !ok || l.KVCounted {
		t.Fatalf("no kv: %+v", l)
	}
	near(t, "weights-only mbu", l.MBU, 16e9*100/3350e9, 1e-9)
	// Nothing decoded, or a fact missing: no values.
	for _, w := range []Window{{Running: 0, SystemTPS: 10}, {Running: 2, SystemTPS: 0}, {Running: -1, SystemTPS: -1}} {
		if _, ok := LiveWindow(s, w); ok {
			t.Errorf("%+v gave values", w)
		}
	}
	if err := (Server{GPU: s.GPU}).Check(); err == nil || !strings.Contains(err.Error(), "model") {
		t.Errorf("no model: %v", err)
	}
	if err := (Server{Model: s.Model}).Check(); err == nil || !strings.Contains(err.Error(), "peak bandwidth") {
		t.Errorf("no gpu: %v", err)
	}
	if err := s.Check(); err != nil {
		t.Error(err)
	}
}
