package collector

import (
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/sample"
)

// TestPromptSplitInvariant: on every engine that splits the prompt by
// where its KV came from, computed + cached + external is all its prompt
// tokens, as each engine's own series count them: vLLM's prompt counter
// counts all three; llama.cpp's counts the computed ones (its help says
// "excluding cached tokens"), so all is computed + cached, which the
// captured server's two requests' timings (prompt_n + cache_n) confirm;
// SGLang's real-time split is all on its own, and the completion-time
// prompt counter agrees once requests have completed. Where vLLM's page
// also prints prompt_tokens_cached_total, cached + external is it.
func TestPromptSplitInvariant(t *testing.T) {
	tests := []struct {
		file    string
		all     float64 // all prompt tokens, from the page or its source line
		counted bool    // PromptTokens counts them all (else: the computed ones)
	}{
		{"vllm_v1_split_written.prom", 100000, true},
		// A real 0.27.1 page: 656 prompt tokens, all computed.
		{"vllm_v0271_cpu_capture_48_streams.prom", 656, true},
		// vLLM's own Rust frontend test: one request of 2 prompt tokens.
		{"vllm_rust_frontend_generate_test.prom", 2, true},
		{"llamacpp_cached_prompt_real.prom", 14 + 14, false},
		{"sglang_split_spec_written.prom", 10000, true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			s, _, err := ReadPage([]byte(readFixture(t, tt.file)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !s.HasCounter[sample.PromptComputed] || !s.HasCounter[sample.PromptCached] {
				t.Fatalf("no split read: %v", s.HasCounter)
			}
			sum := s.Counter[sample.PromptComputed] + s.Counter[sample.PromptCached] + s.Counter[sample.PromptExternal]
			if sum != tt.all {
				t.Errorf("computed %v + cached %v + external %v = %v, want all %v", s.Counter[sample.PromptComputed],
					s.Counter[sample.PromptCached], s.Counter[sample.PromptExternal], sum, tt.all)
			}
			// vLLM's own cached total (local + external) where the page has
			// it: the split's cached and transferred tokens must make it up.
			page, err := ParsePage(strings.NewReader(readFixture(t, tt.file)))
			if err != nil {
				t.Fatal(err)
			}
			if ss, ok := page["vllm:prompt_tokens_cached_total"]; ok {
				var total float64
				for _, x := range ss {
					total += x.value
				}
				if got := s.Counter[sample.PromptCached] + s.Counter[sample.PromptExternal]; got != total {
					t.Errorf("cached %v + external %v = %v, the page's prompt_tokens_cached_total %v",
						s.Counter[sample.PromptCached], s.Counter[sample.PromptExternal], got, total)
				}
			}
			want := tt.all
			if !tt.counted {
				want = s.Counter[sample.PromptComputed]
			}
			if s.Counter[sample.PromptTokens] != want {
				t.Errorf("prompt_tokens %v, want %v", s.Counter[sample.PromptTokens], want)
			}
		})
	}
}

// TestSpeculationAndWaitingRead: the engines' speculative-decoding
// series, why requests wait and the sleep state, summed over
// data-parallel engines (averaged where they are ratios or states), rank 0
// of tensor-parallel ones only; absent where the engine lacks them.
func TestSpeculationAndWaitingRead(t *testing.T) {
	tests := []struct {
		file     string
		counters map[sample.Counter]float64
		gauges   map[sample.Gauge]float64
		absent   []sample.Gauge
		// noCounter: counters the page lacks, or whose line was cut.
		noCounter []sample.Counter
	}{
		{"vllm_v1_split_written.prom",
			map[sample.Counter]float64{sample.SpecDrafts: 6000, sample.SpecDraftTokens: 18000, sample.SpecAccepted: 9000,
				sample.PrefixQueries: 100000, sample.PrefixHits: 42000, sample.PromptExternal: 5000},
			map[sample.Gauge]float64{sample.WaitingCapacity: 1, sample.WaitingDeferred: 4, sample.Waiting: 5, sample.Awake: 1},
			[]sample.Gauge{sample.SpecAcceptRate, sample.SpecAcceptLength}, nil},
		{"sglang_split_spec_written.prom", nil,
			map[sample.Gauge]float64{sample.SpecAcceptLength: 2.6, sample.SpecAcceptRate: 0.53},
			[]sample.Gauge{sample.WaitingCapacity, sample.WaitingDeferred, sample.Awake}, nil},
		{"llamacpp_cached_prompt_real.prom",
			map[sample.Counter]float64{sample.SpecDrafts: 0, sample.SpecDraftTokens: 0, sample.SpecAccepted: 0},
			nil, []sample.Gauge{sample.WaitingCapacity, sample.Awake, sample.SpecAcceptRate}, nil},
		// A printed vLLM page: the _created samples are gauges of their
		// own, never the counters; the accepted count's line was cut.
		{"vllm_spec_decode_created_pr41916.prom",
			map[sample.Counter]float64{sample.SpecDrafts: 6491797, sample.SpecDraftTokens: 6491797},
			nil, []sample.Gauge{sample.Awake, sample.WaitingCapacity}, []sample.Counter{sample.SpecAccepted, sample.PromptCached}},
		// A real 0.27.1 page: 32 waiting, all for capacity; awake.
		{"vllm_v0271_cpu_capture_48_streams.prom",
			map[sample.Counter]float64{sample.PromptComputed: 656, sample.PromptCached: 0, sample.PromptExternal: 0},
			map[sample.Gauge]float64{sample.WaitingCapacity: 32, sample.WaitingDeferred: 0, sample.Waiting: 32, sample.Awake: 1},
			[]sample.Gauge{sample.SpecAcceptRate, sample.SpecAcceptLength},
			[]sample.Counter{sample.SpecDrafts, sample.SpecDraftTokens, sample.SpecAccepted}},
		// Newer vLLM's fully-awake gauge, averaged over its engines.
		{"vllm_fully_awake_test_sleep_state.prom", nil,
			map[sample.Gauge]float64{sample.Awake: 0.5}, nil, nil},
		// SGLang relayed by SMG's sidecar (sglang_ for sglang:): the
		// computed prefill read, the cut cached and decode lines absent.
		{"sglang_smg_sidecar_relay_pr813.prom",
			map[sample.Counter]float64{sample.PromptComputed: 55}, nil, []sample.Gauge{sample.SpecAcceptRate},
			[]sample.Counter{sample.PromptCached, sample.GenerationTokens}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			s, _, err := ReadPage([]byte(readFixture(t, tt.file)), nil)
			if err != nil {
				t.Fatal(err)
			}
			for c, v := range tt.counters {
				if !s.HasCounter[c] || s.Counter[c] != v {
					t.Errorf("%v = %v (read %v), want %v", c, s.Counter[c], s.HasCounter[c], v)
				}
			}
			for g, v := range tt.gauges {
				if !s.HasGauge[g] || s.Gauge[g] != v {
					t.Errorf("%v = %v (read %v), want %v", g, s.Gauge[g], s.HasGauge[g], v)
				}
			}
			for _, g := range tt.absent {
				if s.HasGauge[g] {
					t.Errorf("%v read as %v from a page without it", g, s.Gauge[g])
				}
			}
			for _, c := range tt.noCounter {
				if s.HasCounter[c] {
					t.Errorf("%v read as %v from a page without it", c, s.Counter[c])
				}
			}
		})
	}
}
