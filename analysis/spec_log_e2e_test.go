package analysis

import (
	"bufio"
	"os"
	"path/filepath"
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
