package agent

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
)

// TestSkippedLinesToldAndCounted feeds the log reader real lines it cannot
// read (testdata/skipped_lines.log): vLLM stat lines a terminal wrapped
// (tenstorrent/tt-inference-server#246) and TensorRT-LLM's iteration line
// from before num_scheduled_requests, whose only count includes padding
// (NVIDIA/TensorRT-LLM#3914). Each is counted by server and reason; the
// first is said once, with its engine and its first 200 bytes.
func TestSkippedLinesToldAndCounted(t *testing.T) {
	b, err := os.ReadFile("testdata/skipped_lines.log")
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	cfg := configtest.Private(t)
	cfg.Servers = []config.ServerConfig{{Name: "s", Engine: "auto", Log: config.LogSourceConfig{File: "x.log"}}}
	p := &pipeline{log: slog.New(slog.NewTextHandler(&logged, nil)), metrics: newMetrics()}
	r, err := p.newLogReader(cfg.Servers[0], func(message) {})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	for i, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		r.line(tail.Line{Text: l, Time: now.Add(time.Duration(i) * time.Second)})
	}
	for reason, want := range map[string]uint64{"unparsed": 2, "padded": 1, "bad_number": 0, "too_long": 0} {
		if got := counted(p.metrics.logSkipped.WithLabelValues("s", reason)); got != want {
			t.Errorf("tpsmon_log_lines_skipped_total{server=s,reason=%s} %v, want %v", reason, got, want)
		}
	}
	out := logged.String()
	if n := strings.Count(out, "cannot read"); n != 1 {
		t.Errorf("said %d times, want once:\n%s", n, out)
	}
	first := "INFO 07-03 23:23:42 [metrics.py:536] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 616.1 tokens/s, Running: 32 r"
	if !strings.Contains(out, "engine=vllm") || !strings.Contains(out, "reason=unparsed") || !strings.Contains(out, first) {
		t.Errorf("the message does not name the engine, reason and first line:\n%s", out)
	}
}
