package agent

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/internal/config"
	"github.com/tpsmon/tpsmon/internal/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
)

func TestMalformedScrapesSkippedAndCounted(t *testing.T) {
	synctest.Test(t, malformedScrapes)
}

func malformedScrapes(t *testing.T) {
	src := &vllmsim.Driven{Rate: 100, Start: time.Now(), ResetAt: time.Now().Add(time.Hour), Malformed: 2}
	client := handlerClient(src)
	client.Timeout = time.Second
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace = 500*time.Millisecond, 100*time.Millisecond
	cfg.Servers = []config.ServerConfig{{Name: "flaky", Engine: "vllm", MetricsURL: "http://flaky/metrics", GPUs: []string{"auto"}, ScrapeInterval: 50 * time.Millisecond}}
	var out bytes.Buffer
	a := New(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(&out)}, Client: client})
	ctx, cancel := context.WithTimeout(context.Background(), 1600*time.Millisecond)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := counted(a.metrics.malformed); n < 5 {
		t.Errorf("malformed scrapes counted %d, want about 15", n)
	}
	if n := strings.Count(out.String(), "tpsmon_server,"); n < 3 {
		t.Errorf("only %d windows written despite good scrapes:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "system_tps=") {
		t.Errorf("no throughput measured between malformed pages:\n%s", out.String())
	}
}

// TestBinaryExitStatus builds tpsmon and checks what an operator sees.
