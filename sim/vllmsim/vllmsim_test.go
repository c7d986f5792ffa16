package vllmsim

import (
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/sample"
)

func TestPagesParseAndFollowLoad(t *testing.T) {
	now := time.Unix(1000, 0)
	load := 1.0
	s := &Server{Model: "sim", SoloTPS: 100, MaxBatch: 32, Load: func(time.Time) float64 { return load }, Now: func() time.Time { return now }}
	read := func() sample.Server {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		smp, err := collector.VLLM.Parse(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		return smp
	}
	a := read()
	now = now.Add(10 * time.Second)
	b := read()
	// Full load: 32 streams at half their solo speed, 1600 tokens/s.
	if d := b.Counter[sample.GenerationTokens] - a.Counter[sample.GenerationTokens]; d != 16000 {
		t.Errorf("10 s at full load produced %v tokens, want 16000", d)
	}
	perUser := (b.Counter[sample.ITLCount] - a.Counter[sample.ITLCount]) / (b.Counter[sample.ITLSum] - a.Counter[sample.ITLSum])
	if math.Abs(perUser-50) > 0.01 {
		t.Errorf("per-user tps %v, want 50", perUser)
	}
	if b.Model != "sim" || b.Gauge[sample.Running] != 32 || b.Gauge[sample.Waiting] != 20 {
		t.Errorf("gauges %+v", b)
	}
	load = 0
	now = now.Add(10 * time.Second)
	c := read()
	if c.Counter[sample.GenerationTokens] != b.Counter[sample.GenerationTokens] || c.Gauge[sample.Running] != 0 {
		t.Errorf("idle server moved: %+v", c)
	}
}

func TestProfileCycle(t *testing.T) {
	start := time.Unix(0, 0)
	p := Profile(start, 100*time.Second)
	for _, tc := range []struct {
		sec  float64
		want float64
	}{{0, 0}, {12.5, 0.5}, {40, 1}, {80, 0}, {112.5, 0.5}} {
		if got := p(start.Add(time.Duration(tc.sec * float64(time.Second)))); got != tc.want {
			t.Errorf("load at %vs = %v, want %v", tc.sec, got, tc.want)
		}
	}
}

// The start-up lines say the model, the weights and the KV capacity as
// tpsmon's collector reads vLLM's own.
func TestStartupLogSaysTheModel(t *testing.T) {
	var b strings.Builder
	if _, err := (Startup{Model: "/models/tiny", WeightsGiB: 1.5, KVTokens: 1234567, At: time.Unix(0, 0).UTC()}).WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	var e collector.EngineFacts
	for _, l := range strings.Split(b.String(), "\n") {
		collector.VLLMFactLine(l, &e)
	}
	want := collector.EngineFacts{LoggedModel: "/models/tiny", LoggedModelFrom: "vLLM engine config", WeightBytesPerGPU: 1.5 * (1 << 30), KVTokens: 1234567, KVTokensFrom: "log"}
	if e != want {
		t.Errorf("facts %+v, want %+v", e, want)
	}
}
