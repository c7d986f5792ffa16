package collector

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return StripSource(string(b))
}

func TestVLLMParse(t *testing.T) {
	type want struct {
		model    string
		counters map[Counter]float64
		gauges   map[Gauge]float64
	}
	tests := []struct {
		file string
		want want
	}{
		{"v1_metrics_design_doc.prom", want{
			model:    "meta-llama/Llama-3.1-8B-Instruct",
			counters: map[Counter]float64{GenerationTokens: 27453},
			gauges:   map[Gauge]float64{Running: 8},
		}},
		{"nim_llm_metrics_datadog_fixture.prom", want{
			model: "meta/llama-3.1-8b-instruct",
			counters: map[Counter]float64{GenerationTokens: 174, PromptTokens: 109,
				ITLSum: 1.856855869293213, ITLCount: 169},
			gauges: map[Gauge]float64{Running: 1, Waiting: 0, KVUsage: 0.0002848191398461977},
		}},
		{"v1_two_engines.prom", want{
			model: "Qwen/Qwen3-8B",
			// Engines are summed; the 0.11 ITL name wins over the old one.
			counters: map[Counter]float64{GenerationTokens: 1500, PromptTokens: 6000, Preemptions: 4,
				ITLSum: 24.75 + 9.9, ITLCount: 1485},
			gauges: map[Gauge]float64{Running: 20, Waiting: 2, KVUsage: 0.7},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := VLLM.Parse(strings.NewReader(readFixture(t, tt.file)))
			if err != nil {
				t.Fatal(err)
			}
			if got.Model != tt.want.model {
				t.Errorf("model = %q, want %q", got.Model, tt.want.model)
			}
			for c := range NumCounters {
				w, ok := tt.want.counters[c]
				if got.HasCounter[c] != ok {
					t.Errorf("%v present = %v, want %v", c, got.HasCounter[c], ok)
				}
				if ok && math.Abs(got.Counter[c]-w) > 1e-9 {
					t.Errorf("%v = %v, want %v", c, got.Counter[c], w)
				}
			}
			for g := range NumGauges {
				w, ok := tt.want.gauges[g]
				if got.HasGauge[g] != ok {
					t.Errorf("%v present = %v, want %v", g, got.HasGauge[g], ok)
				}
				if ok && math.Abs(got.Gauge[g]-w) > 1e-9 {
					t.Errorf("%v = %v, want %v", g, got.Gauge[g], w)
				}
			}
		})
	}
}

func TestVLLMParseErrors(t *testing.T) {
	tests := []struct {
		file string
		want error
	}{
		{"malformed.prom", ErrMalformed},
		// Only per-request histograms: nothing that carries throughput.
		{"v1_metrics_dp_engine_label.prom", ErrNoEngineMetrics},
		{"v0_metrics_excerpt.prom", ErrNoEngineMetrics},
	}
	for _, tt := range tests {
		_, err := VLLM.Parse(strings.NewReader(readFixture(t, tt.file)))
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.file, err, tt.want)
		}
	}
}
