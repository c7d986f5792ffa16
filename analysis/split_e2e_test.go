package analysis

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// TestPromptSplitThroughTheJoiner: each engine's page with the split,
// read by its dialect, joined into a window (two scrapes, the first at
// half of every counter) and analysed: computed + cached + external is
// the window's prompt tokens wherever the engine's prompt counter counts
// all of them (vLLM; SGLang once requests completed), and the computed
// ones where it counts only those (llama.cpp); prompt_tps is the
// computed tokens over the observed stretch.
func TestPromptSplitThroughTheJoiner(t *testing.T) {
	tests := []struct {
		file         string
		countsCached bool // prompt_tokens counts cached tokens too
	}{
		{"vllm_v1_split_written.prom", true},
		{"vllm_rust_frontend_generate_test.prom", true},
		{"sglang_split_spec_written.prom", true},
		{"llamacpp_cached_prompt_real.prom", false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "collector", "testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var page strings.Builder
			for _, l := range strings.SplitAfter(string(b), "\n") {
				if !strings.HasPrefix(l, "# source:") {
					page.WriteString(l)
				}
			}
			s1, _, err := collector.ReadPage([]byte(page.String()), nil)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			s0 := s1
			for c := range sample.NumCounters {
				s0.Counter[c] /= 2
			}
			s0.Time, s1.Time = start.Add(time.Second), start.Add(9*time.Second)
			j := window.New(window.Config{Window: 10 * time.Second, MaxGap: 10 * time.Second, Start: start}, []window.Server{{Name: "s"}})
			j.AddServer("s", s0)
			j.AddServer("s", s1)
			cs := Analyze(j.Flush(start.Add(time.Minute)), &Facts{})
			if len(cs) == 0 || len(cs[0].Servers) != 1 {
				t.Fatalf("windows: %+v", cs)
			}
			a := cs[0].Servers[0]
			if !a.PromptComputedTokens.OK || !a.PromptCachedTokens.OK || !a.PromptTokens.OK {
				t.Fatalf("split %v %v, prompt_tokens %v", a.PromptComputedTokens, a.PromptCachedTokens, a.PromptTokens)
			}
			sum := a.PromptComputedTokens.V + a.PromptCachedTokens.V + a.PromptExternalTokens.V
			want := a.PromptComputedTokens.V
			if tt.countsCached {
				want = sum
			}
			if a.PromptTokens.V != want {
				t.Errorf("prompt_tokens %d, want %d (computed %d + cached %d + external %v)", a.PromptTokens.V, want,
					a.PromptComputedTokens.V, a.PromptCachedTokens.V, a.PromptExternalTokens)
			}
			// Both scrapes fall in the window: the rate is over their 8 s.
			if rate := a.Counts[sample.PromptComputed].Delta / 8; !a.PromptTPS.OK || a.PromptTPS.V < rate*0.99 || a.PromptTPS.V > rate*1.01 {
				t.Errorf("prompt_tps %v, want the computed rate %v", a.PromptTPS, rate)
			}
		})
	}
}
