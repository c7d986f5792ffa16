package collector

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/sample"
)

// stripSource drops the "# source:" provenance lines of the fixtures.
func stripSource(text string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		if !strings.HasPrefix(l, "# source:") {
			b.WriteString(l)
		}
	}
	return b.String()
}

func readFixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return stripSource(string(b))
}

func TestDialectsOnFixtures(t *testing.T) {
	type want struct {
		engine   string
		model    string
		counters map[sample.Counter]float64
		gauges   map[sample.Gauge]float64
	}
	tests := []struct {
		file string
		want want
	}{
		{"v1_metrics_design_doc.prom", want{"vllm", "meta-llama/Llama-3.1-8B-Instruct",
			map[sample.Counter]float64{sample.GenerationTokens: 27453, sample.FinishedRequests: 132, sample.AbortedRequests: 0}, map[sample.Gauge]float64{sample.Running: 8}}},
		// V1's step histogram: its count is the engine's steps.
		{"vllm_v1_steps_cache_written.prom", want{"vllm", "meta-llama/Llama-3.1-8B-Instruct",
			map[sample.Counter]float64{sample.GenerationTokens: 52000, sample.Iterations: 3400}, map[sample.Gauge]float64{sample.Running: 16}}},
		// A real 0.27.1 page: why requests wait, the sleep state and the
		// prompt's split, each as the page states it; _created gauges ignored.
		{"vllm_v0271_cpu_capture_48_streams.prom", want{"vllm", "Qwen/Qwen2.5-0.5B-Instruct",
			map[sample.Counter]float64{sample.GenerationTokens: 807, sample.PromptTokens: 656, sample.Preemptions: 0,
				sample.ITLSum: 17.33309237821959, sample.ITLCount: 790, sample.FinishedRequests: 1, sample.AbortedRequests: 0,
				sample.PromptComputed: 656, sample.PromptCached: 0, sample.PromptExternal: 0,
				sample.PrefixQueries: 656, sample.PrefixHits: 0, sample.Iterations: 57},
			map[sample.Gauge]float64{sample.Running: 16, sample.Waiting: 32, sample.KVUsage: 0.0058629534628068525,
				sample.WaitingCapacity: 32, sample.WaitingDeferred: 0, sample.Awake: 1}}},
		{"v1_two_engines.prom", want{"vllm", "Qwen/Qwen3-8B",
			// Engines are summed; the 0.11 ITL name wins over the old one.
			map[sample.Counter]float64{sample.GenerationTokens: 1500, sample.PromptTokens: 6000, sample.Preemptions: 4, sample.ITLSum: 24.75 + 9.9, sample.ITLCount: 1485},
			map[sample.Gauge]float64{sample.Running: 20, sample.Waiting: 2, sample.KVUsage: 0.7}}},
		{"nim_llm_metrics_datadog_fixture.prom", want{"nim", "meta/llama-3.1-8b-instruct",
			map[sample.Counter]float64{sample.GenerationTokens: 174, sample.PromptTokens: 109, sample.ITLSum: 1.856855869293213, sample.ITLCount: 169, sample.FinishedRequests: 5},
			map[sample.Gauge]float64{sample.Running: 1, sample.Waiting: 0, sample.KVUsage: 0.0002848191398461977}}},
		{"metrics_docs_v0.4_era.prom", want{"sglang", "meta-llama/Llama-3.1-8B-Instruct",
			map[sample.Counter]float64{sample.PromptTokens: 8.128902e+06, sample.CompletionTokens: 7.557572e+06,
				sample.CompletionSeconds: 3.116093850019932e+06, sample.CompletionRequests: 11228,
				sample.ITLSum: 866964.5791549598, sample.ITLCount: 7.400757e+06},
			map[sample.Gauge]float64{sample.Running: 162, sample.Waiting: 2826, sample.KVUsage: 0.28, sample.GenRate: 86.50814177726902}}},
		{"metrics_v0.4.4_engine_type_label.prom", want{"sglang", "/shared/public/models/Meta-Llama-3-8B-Instruct",
			nil, map[sample.Gauge]float64{sample.Running: 0, sample.KVUsage: 0, sample.GenRate: 0}}},
		{"metrics_2025_06_no_kv.prom", want{"llamacpp", "",
			map[sample.Counter]float64{sample.PromptTokens: 143, sample.PromptComputed: 143, sample.CompletionTokens: 673, sample.CompletionSeconds: 29.567, sample.ITLSum: 29.567, sample.ITLCount: 673},
			nil}},
		{"metrics_ik_llama_fork.prom", want{"llamacpp", "",
			map[sample.Counter]float64{sample.PromptTokens: 6886, sample.PromptComputed: 6886, sample.CompletionTokens: 3469, sample.CompletionSeconds: 3544.27, sample.ITLSum: 3544.27, sample.ITLCount: 3469},
			nil}},
		{"nv_trt_llm_metrics_readme.prom", want{"triton", "tensorrt_llm",
			map[sample.Counter]float64{sample.Iterations: 0},
			map[sample.Gauge]float64{sample.Running: 0, sample.Waiting: 1, sample.KVUsage: 0.4875, sample.GenRequests: 0}}},
		{"nv_trt_llm_v1_and_base_triton_readme.prom", want{"triton", "tensorrt_llm", nil, map[sample.Gauge]float64{sample.Waiting: 0}}},
		{"tgi_written.prom", want{"tgi", "",
			map[sample.Counter]float64{sample.PromptTokens: 5000, sample.CompletionTokens: 12000, sample.CompletionSeconds: 300, sample.CompletionRequests: 40,
				sample.ITLSum: 1.2, sample.ITLCount: 40, sample.AbortedRequests: 3 + 2},
			map[sample.Gauge]float64{sample.Running: 6, sample.Waiting: 3, sample.GenRequests: 6}}},
		{"lmdeploy_written.prom", want{"lmdeploy", "internlm/internlm2_5-7b-chat",
			map[sample.Counter]float64{sample.GenerationTokens: 3000, sample.PromptTokens: 9000, sample.ITLSum: 30, sample.ITLCount: 3000},
			map[sample.Gauge]float64{sample.Running: 12, sample.Waiting: 1, sample.KVUsage: 0.25}}},
		{"trtllm_serve_written.prom", want{"trtllm", "llama",
			map[sample.Counter]float64{sample.GenerationTokens: 777, sample.PromptTokens: 333, sample.ITLSum: 7.77, sample.ITLCount: 777},
			map[sample.Gauge]float64{sample.Running: 3, sample.Waiting: 0, sample.KVUsage: 0.5}}},
		{"sglang_tp_ranks_written.prom", want{"sglang", "qwen",
			// tp_rank 1 sees the same batch and is never added; dp ranks are.
			map[sample.Counter]float64{sample.GenerationTokens: 300, sample.PromptComputed: 999, sample.AbortedRequests: 4},
			map[sample.Gauge]float64{sample.Running: 10, sample.GenRate: 700}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			page, err := ParsePage(strings.NewReader(readFixture(t, tt.file)))
			if err != nil {
				t.Fatal(err)
			}
			d, err := Detect(page)
			if err != nil {
				t.Fatal(err)
			}
			if d.Engine != tt.want.engine {
				t.Fatalf("detected %s, want %s", d.Engine, tt.want.engine)
			}
			got, err := d.Read(page)
			if err != nil {
				t.Fatal(err)
			}
			if got.Model != tt.want.model {
				t.Errorf("model = %q, want %q", got.Model, tt.want.model)
			}
			for c := range sample.NumCounters {
				w, ok := tt.want.counters[c]
				if got.HasCounter[c] != ok {
					t.Errorf("%v present = %v, want %v", c, got.HasCounter[c], ok)
				}
				if ok && math.Abs(got.Counter[c]-w) > 1e-9*math.Max(1, w) {
					t.Errorf("%v = %v, want %v", c, got.Counter[c], w)
				}
			}
			for g := range sample.NumGauges {
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

func TestParseErrors(t *testing.T) {
	_, err := VLLM.Parse(strings.NewReader(readFixture(t, "malformed.prom")))
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("malformed: %v", err)
	}
	// Only per-request histograms: nothing that carries throughput.
	for _, f := range []string{"v1_metrics_dp_engine_label.prom", "v0_metrics_excerpt.prom"} {
		if _, err := VLLM.Parse(strings.NewReader(readFixture(t, f))); !errors.Is(err, ErrNoEngineMetrics) {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := SGLang.Parse(strings.NewReader(readFixture(t, "metrics_first_version_name_label.prom"))); !errors.Is(err, ErrNoEngineMetrics) {
		t.Errorf("SGLang's first version (TTFT only): %v", err)
	}
	p, _ := ParsePage(strings.NewReader("go_goroutines 7\nprocess_cpu_seconds_total 3\n"))
	if _, err := Detect(p); !errors.Is(err, ErrNoEngineMetrics) {
		t.Errorf("detect on a non-engine page: %v", err)
	}
	if _, err := DialectFor("ollama"); !errors.Is(err, engine.ErrNoMetrics) || !strings.Contains(err.Error(), "log") {
		t.Errorf("ollama: %v", err)
	}
	if _, err := DialectFor("vllm2"); !errors.Is(err, engine.ErrUnknown) {
		t.Errorf("vllm2: %v", err)
	}
}

func at(s float64) time.Time { return time.Unix(1000, 0).Add(time.Duration(s * float64(time.Second))) }

func TestDeriver(t *testing.T) {
	t.Run("gen_throughput gauge gated on running", func(t *testing.T) {
		var d Deriver
		mk := func(sec, rate, running float64) sample.Server {
			s := sample.Server{Time: at(sec)}
			s.SetGauge(sample.GenRate, rate)
			s.SetGauge(sample.Running, running)
			return d.Derive(s)
		}
		mk(0, 500, 4)
		a := mk(2, 500, 4)
		b := mk(4, 500, 0) // idle: the gauge keeps its stale value
		if a.Counter[sample.GenerationTokens] != 1000 || b.Counter[sample.GenerationTokens] != 1000 {
			t.Errorf("built counter %v then %v, want 1000 and 1000", a.Counter[sample.GenerationTokens], b.Counter[sample.GenerationTokens])
		}
	})
	t.Run("iterations times generation requests", func(t *testing.T) {
		var d Deriver
		mk := func(sec, iters, gen float64) sample.Server {
			s := sample.Server{Time: at(sec)}
			s.SetCounter(sample.Iterations, iters)
			s.SetGauge(sample.GenRequests, gen)
			return d.Derive(s)
		}
		mk(0, 100, 8)
		s := mk(1, 150, 8)
		if s.Counter[sample.GenerationTokens] != 400 || s.Counter[sample.ITLCount]/s.Counter[sample.ITLSum] != 50 {
			t.Errorf("tokens %v, per-user %v; want 400 and 50/s", s.Counter[sample.GenerationTokens], s.Counter[sample.ITLCount]/s.Counter[sample.ITLSum])
		}
	})
	t.Run("completion tokens spread over the requests' duration", func(t *testing.T) {
		var d Deriver
		mk := func(sec, tok, secs, reqs float64) sample.Server {
			s := sample.Server{Time: at(sec)}
			s.SetCounter(sample.CompletionTokens, tok)
			s.SetCounter(sample.CompletionSeconds, secs)
			s.SetCounter(sample.CompletionRequests, reqs)
			return d.Derive(s)
		}
		mk(0, 1000, 100, 10)
		s := mk(1, 1600, 124, 12) // two requests of 12 s each finished
		if len(s.Intervals) != 1 {
			t.Fatalf("intervals %v", s.Intervals)
		}
		iv := s.Intervals[0]
		if iv.Tokens != 600 || !iv.End.Equal(at(1)) || !iv.Start.Equal(at(-11)) || iv.Observed {
			t.Errorf("interval %+v, want 600 tokens over (-11, 1]", iv)
		}
		if s.HasCounter[sample.GenerationTokens] {
			t.Error("completion tokens passed off as a real-time counter")
		}
	})
	t.Run("llama.cpp busy-slot decodes reconciled with completions", func(t *testing.T) {
		// Scrapes of a server running requests: decodes and the lifetime
		// average busy slots per decode give the live count; the exact
		// count moves at completion only.
		steps := []struct {
			sec, decodes, slots, done, running float64
			want                               float64
		}{
			{0, 1000, 1.5, 1500, 0, 0},     // idle: the offset is taken here
			{2, 1200, 1.5, 1500, 1, 300},   // 300 busy-slot decodes, nothing done yet
			{4, 1400, 1.75, 1800, 2, 950},  // 2450-1800 in flight on top of 1800 done
			{6, 1500, 1.8, 2450, 1, 1200},  // live 2700: done 950 more, 250 in flight
			{8, 1500, 1.8, 2700, 0, 1200},  // idle: done caught up exactly
			{10, 1500, 1.8, 2710, 0, 1210}, // a completion the estimate missed lands now
			{12, 100, 2, 50, 1, -1},        // a fall is held until the next scrape confirms a restart
			{14, 200, 2, 60, 1, 1610},      // confirmed: 400 live since the restart
			{16, 300, 2, 20, 1, -1},        // the exact count fell (restart again): held, nothing negative
			{18, 400, 2, 30, 1, 2010},      // confirmed: 400 more live
		}
		var d Deriver
		for _, st := range steps {
			s := sample.Server{Time: at(st.sec)}
			s.SetCounter(sample.Decodes, st.decodes)
			s.SetGauge(sample.SlotsPerDecode, st.slots)
			s.SetCounter(sample.CompletionTokens, st.done)
			s.SetGauge(sample.Running, st.running)
			s = d.Derive(s)
			if st.want < 0 {
				if s.HasCounter[sample.GenerationTokens] {
					t.Errorf("t=%v: tokens %v while a fall awaits confirmation", st.sec, s.Counter[sample.GenerationTokens])
				}
				continue
			}
			if got := s.Counter[sample.GenerationTokens]; math.Abs(got-st.want) > 1e-9 || len(s.Intervals) > 0 {
				t.Errorf("t=%v: tokens %v (intervals %v), want %v", st.sec, got, s.Intervals, st.want)
			}
		}
	})
}

// The dialects are the registry's engines that serve metrics, no more, no
// fewer.
func TestDialectsMatchRegistry(t *testing.T) {
	have := map[string]bool{}
	for _, d := range dialects {
		e, err := engine.Lookup(d.Engine)
		if err != nil || e.Name != d.Engine || !e.Metrics {
			t.Errorf("dialect %s: registry says %+v (%v)", d.Engine, e, err)
		}
		have[d.Engine] = true
	}
	for _, e := range engine.All {
		if e.Metrics && !have[e.Name] {
			t.Errorf("%s: the registry says it serves metrics; no dialect reads them", e.Name)
		}
	}
}

// ReadPage detects the dialect when given none, reads with the one given
// otherwise, and a malformed page's error names the line of the page.
func TestReadPage(t *testing.T) {
	page := []byte("# HELP go_goroutines Goroutines.\ngo_goroutines 7\nvllm:num_requests_running 2\nvllm:generation_tokens_total 10\n")
	s, d, err := ReadPage(page, nil)
	if err != nil || d != &VLLM || s.Engine != "vllm" {
		t.Fatalf("detect: %v %+v (%v)", d, s, err)
	}
	if !s.HasCounter[sample.GenerationTokens] || s.Counter[sample.GenerationTokens] != 10 {
		t.Errorf("generation tokens: %+v", s)
	}
	if _, d, err := ReadPage(page, &SGLang); d != &SGLang || !errors.Is(err, ErrNoEngineMetrics) {
		t.Errorf("given SGLang on a vLLM page: %v (%v)", d, err)
	}
	bad := []byte("go_goroutines 7\nprocess_cpu_seconds_total 3\n\nvllm:generation_tokens_total{model_name=\"m\" 1\n")
	if _, _, err := ReadPage(bad, &VLLM); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("malformed: %v, want the page's line 4", err)
	}
}

// A vLLM page re-exposed by Ray Serve's metrics agent (ray_vllm:, and
// ray_vllm_ since Ray turned the colon into _) reads exactly as the page
// itself: detected, read with the dialect given, and through the live
// scraper's series cache. The relays are the registry's, not cases here.
func TestRelayedPagesReadAsTheEngine(t *testing.T) {
	for _, f := range []string{"v1_metrics_design_doc.prom", "v1_two_engines.prom"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		want, d, err := ReadPage(b, nil)
		if err != nil || d != &VLLM {
			t.Fatalf("%s: %v (%v)", f, d, err)
		}
		e, _ := engine.Lookup("vllm")
		if len(e.MetricRelays) == 0 {
			t.Fatal("the registry names no relay of vLLM's page")
		}
		for _, prefix := range e.MetricRelays {
			page := []byte(strings.ReplaceAll(string(b), "vllm:", prefix))
			var cache seriesCache
			for _, read := range []struct {
				how string
				d   *Dialect
				c   *seriesCache
			}{{"detected", nil, nil}, {"given", &VLLM, nil}, {"cached", &VLLM, &cache}, {"cached again", &VLLM, &cache}} {
				got, gd, err := readPage(page, read.d, read.c)
				if err != nil || gd != &VLLM {
					t.Errorf("%s %s %s: %v (%v)", f, prefix, read.how, gd, err)
					continue
				}
				if got.Engine != want.Engine || got.Model != want.Model || got.Counter != want.Counter || got.Gauge != want.Gauge ||
					got.HasCounter != want.HasCounter || got.HasGauge != want.HasGauge {
					t.Errorf("%s %s %s: read %+v, the page itself %+v", f, prefix, read.how, got, want)
				}
			}
		}
	}
}
