package analysis

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/logline"
	"github.com/tpsmon/tpsmon/window"
)

// TestSpeculationFromLogs: real server logs with speculation lines, read
// by logline, joined and analysed: each window's acceptance is its lines'
// accepted ÷ drafted (vLLM: per logging interval; llama.cpp: per finished
// request), tokens per step absent (the logs give no step count), and the
// finding spec_ineffective where acceptance is under the bound.
func TestSpeculationFromLogs(t *testing.T) {
	started := time.Date(2026, 6, 15, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		file    string
		engine  string
		windows []float64 // acceptance per window with speculation, in order
		finding []string
	}{
		// 489/1572 and 455/1590: the second under the 0.3 bound.
		{"vllm_v1_log_specdecode_interval_club3090_105.log", "vllm", []float64{489.0 / 1572, 455.0 / 1590},
			[]string{"", FindingSpecIneffective}},
		{"llamacpp_print_timing_spec_mean_acceptance_pr24536.log", "llamacpp", []float64{167.0 / 259}, []string{""}},
		{"llamacpp_print_timing_per_line_timestamps_spec.log", "llamacpp", []float64{55.0 / 119}, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("..", "collector", "logline", "testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			p, err := logline.NewParser(tt.engine)
			if err != nil {
				t.Fatal(err)
			}
			p.Year, p.Timestamps, p.StartedAt = 2026, true, started
			var st logline.Stream
			j := window.New(window.Config{Window: 10 * time.Second, MaxGap: 30 * time.Second, Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
				[]window.Server{{Name: "s"}})
			var last time.Time
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "# source:") {
					continue
				}
				r, ok := p.Parse(sc.Bytes())
				if !ok {
					continue
				}
				if iv, ok := st.Interval(r, r.Time); ok {
					j.AddLog("s", iv)
					last = r.Time
				}
			}
			var rates []float64
			var findings []string
			for _, c := range Analyze(j.Flush(last.Add(time.Minute)), &Facts{}) {
				a := c.Servers[0]
				if !a.SpecAcceptRate.OK {
					if a.SpecFinding.OK {
						t.Errorf("%v: a finding %q without an acceptance rate", c.Start, a.SpecFinding.V)
					}
					continue
				}
				if a.TokensPerStep.OK {
					t.Errorf("%v: tokens per step %v from a log that counts no steps", c.Start, a.TokensPerStep.V)
				}
				rates = append(rates, a.SpecAcceptRate.V)
				findings = append(findings, a.SpecFinding.V)
			}
			if len(rates) != len(tt.windows) {
				t.Fatalf("acceptance in %d windows %v, want %d %v", len(rates), rates, len(tt.windows), tt.windows)
			}
			for i, want := range tt.windows {
				if d := rates[i] - want; d > 1e-9 || d < -1e-9 {
					t.Errorf("window %d: acceptance %v, want %v", i, rates[i], want)
				}
				if findings[i] != tt.finding[i] {
					t.Errorf("window %d: finding %q, want %q", i, findings[i], tt.finding[i])
				}
			}
		})
	}
}

// TestPromptSplitFromLogs: real SGLang logs' prefill batch lines, read,
// joined and analysed: over the run, the windows' computed tokens are
// the lines' #new-token, their cached ones the lines' #cached-token
// (read here apart, by a pattern of the test's own), prompt_tokens the
// computed ones, and prefix_hit_rate cached over both in each window.
func TestPromptSplitFromLogs(t *testing.T) {
	batch := regexp.MustCompile(`#new-token: (\d+), #cached-token: (\d+)`)
	for _, file := range []string{"sglang_prefill_batch_period_v0.4.6.log", "sglang_decode_prefill_comma_no_tp.log"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "collector", "logline", "testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			p, err := logline.NewParser("sglang")
			if err != nil {
				t.Fatal(err)
			}
			p.Year, p.Timestamps = 2026, true
			var st logline.Stream
			j := window.New(window.Config{Window: 10 * time.Second, MaxGap: 30 * time.Second, Start: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)},
				[]window.Server{{Name: "s"}})
			var wantNew, wantCached float64
			var last time.Time
			for _, line := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(line, "# source:") {
					continue
				}
				if m := batch.FindStringSubmatch(line); m != nil {
					n, _ := strconv.ParseFloat(m[1], 64)
					c, _ := strconv.ParseFloat(m[2], 64)
					wantNew, wantCached = wantNew+n, wantCached+c
				}
				if r, ok := p.Parse([]byte(line)); ok {
					if iv, ok := st.Interval(r, r.Time); ok {
						j.AddLog("s", iv)
						last = r.Time
					}
				}
			}
			if wantNew == 0 {
				t.Fatal("no prefill batch line")
			}
			var comp, cached int64
			for _, c := range Analyze(j.Flush(last.Add(time.Minute)), &Facts{}) {
				a := c.Servers[0]
				if a.PromptComputedTokens.OK != a.PromptCachedTokens.OK {
					t.Fatalf("%v: half a split %v %v", c.Start, a.PromptComputedTokens, a.PromptCachedTokens)
				}
				if !a.PromptComputedTokens.OK {
					continue
				}
				comp, cached = comp+a.PromptComputedTokens.V, cached+a.PromptCachedTokens.V
				if a.PromptTokens.V != a.PromptComputedTokens.V {
					t.Errorf("%v: prompt_tokens %v, want the computed %v", c.Start, a.PromptTokens.V, a.PromptComputedTokens.V)
				}
				if all := float64(a.PromptComputedTokens.V + a.PromptCachedTokens.V); all > 0 {
					if want := float64(a.PromptCachedTokens.V) / all; !a.PrefixHitRate.OK || a.PrefixHitRate.V-want > 1e-3 || want-a.PrefixHitRate.V > 1e-3 {
						t.Errorf("%v: prefix_hit_rate %v, want %v", c.Start, a.PrefixHitRate, want)
					}
				}
			}
			if float64(comp) != wantNew || float64(cached) != wantCached {
				t.Errorf("computed %d, cached %d; the lines say %v new and %v cached", comp, cached, wantNew, wantCached)
			}
		})
	}
}
