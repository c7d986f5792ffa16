package logsim

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/logline"
)

// TestNoisyVLLMReads checks that the parser reads the stat lines of the
// noisy log, and nothing else.
func TestNoisyVLLMReads(t *testing.T) {
	var b bytes.Buffer
	const n = 3 * (NoisyPerStat + 1)
	if err := NoisyVLLM(&b, n, time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	p, _ := logline.NewParser("auto")
	lines, stats := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n"), 0
	for _, l := range lines {
		if r, ok := p.Parse([]byte(l)); ok {
			stats++
			if r.GenTPS < 1000 || r.Engine != "vllm" {
				t.Errorf("stat line read as %+v", r)
			}
		}
	}
	if len(lines) != n || stats != 3 || p.Skipped != 0 {
		t.Errorf("%d lines, %d read as stat lines, %d skipped; want %d, 3, 0", len(lines), stats, p.Skipped, n)
	}
}
