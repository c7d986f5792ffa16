package agent

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
)

// slowOutput takes 2 s over each write, as a stalled disk or process
// would: meanwhile the scrapes queue up for the main loop.
type slowOutput struct{ w *sink.LPWriter }

func (s slowOutput) WriteWindows(cs []analysis.Closed) error {
	time.Sleep(2 * time.Second)
	return s.w.WriteWindows(cs)
}

// TestStalledLoopTakesWhatWasHandedOver: after the main loop stalls, the
// scrapes handed over meanwhile go into their windows before the next
// tick closes them; none is late. Before, select took the tick or a
// waiting scrape at random, and the scrapes taken after the flush were
// counted late and lost (at load 4, 49 log lines of the busy reload
// test: 4,704 tokens).
func TestStalledLoopTakesWhatWasHandedOver(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sim := &vllmsim.Driven{Rate: 100, Start: time.Now().Add(-time.Hour), ResetAt: time.Now().Add(time.Hour)}
		cfg := bubbleConfig(t)
		cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
		cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: "http://llm/metrics",
			GPUs: []string{"auto"}, ScrapeInterval: 50 * time.Millisecond}}
		var out bytes.Buffer
		a := newAgent(cfg, Options{Outputs: []WindowWriter{slowOutput{sink.NewLPWriter(&out)}}}, hooks{client: handlerClient(sim)})
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		if err := a.Run(ctx); err != nil {
			t.Fatal(err)
		}
		windows := bytes.Count(out.Bytes(), []byte("tpsmon_server,"))
		if windows < 10 {
			t.Fatalf("%d windows written", windows)
		}
		if late := counted(a.metrics.late); late > 0 {
			t.Errorf("%v samples late; %d windows written, each write taking 2 s", late, windows)
		}
	})
}
