package agent

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// TestHistogramsReadAtTheEdgesCountEveryRequest runs the daemon against a
// vLLM whose requests are known, its windows of 1 s scraped every 100 ms:
// the scrapers read the histograms only around the windows' edges, and
// every window written, the last one cut short by the stop included,
// counts each of its requests once. 10 and 30 requests take turns, in the
// middle of each window: a reading that went to the wrong window, or one
// held and never taken, moves a count by a request or more.
func TestHistogramsReadAtTheEdgesCountEveryRequest(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "histedge")

	const windows = 7
	now := time.Now()
	first := now.Truncate(time.Second).Add(3 * time.Second) // the first window with requests
	want := map[int64]float64{}                             // by window start, in s
	var reqs []vllmsim.Request
	for w := range windows {
		ws := first.Add(time.Duration(w) * time.Second)
		n := 10 + 20*(w%2)
		for i := range n {
			// First tokens between 0.3 and 0.6 s into the window.
			reqs = append(reqs, vllmsim.Request{Start: ws.Add(300*time.Millisecond + time.Duration(i)*300*time.Millisecond/time.Duration(n)),
				TTFT: time.Duration(1+i%3) * 20 * time.Millisecond, OutputTokens: 1})
		}
		want[ws.Unix()] = float64(n)
	}
	page := vllmsim.Latencies{Model: "m", Requests: reqs}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, page.Page(time.Now()))
	}))
	defer srv.Close()

	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = time.Second, 300*time.Millisecond
	cfg.GPU.Interval = 100 * time.Millisecond
	cfg.SLO = analysis.SLO{Objective: latency.Objective{TTFT: 50 * time.Millisecond}}
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: srv.URL + "/metrics",
		GPUs: []string{"0"}, ScrapeInterval: 100 * time.Millisecond}}
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db+"/autogen"
	cfg.Sink.Spool.Dir = t.TempDir()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gpus := gpusim.Steady{Start: now}
	done := make(chan error, 1)
	go func() {
		done <- New(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			OpenGPU: func() (GPUSampler, error) { return gpus, nil }}).Run(ctx)
	}()
	// Stopped 0.85 s into the last window: its requests were all read
	// (on a page held unread, which the stop reads) and the window is
	// written short.
	time.Sleep(time.Until(first.Add((windows-1)*time.Second + 850*time.Millisecond)))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	series := influxtest.QueryEpoch(t, base, db, `SELECT slo_requests FROM tpsmon_server WHERE "server" = 'llm'`, "s")
	if len(series) != 1 {
		t.Fatalf("%d series of slo_requests", len(series))
	}
	got := map[int64]float64{}
	for _, r := range series[0].Rows() {
		got[int64(influxtest.Num(t, r["time"]))] = influxtest.Num(t, r[schema.FieldSLORequests])
	}
	for ws, n := range want {
		g, ok := got[ws]
		if !ok {
			t.Errorf("window %v: no slo_requests written, want %g (all: %v)", time.Unix(ws, 0), n, got)
			continue
		}
		if math.Abs(g-n) > 0.01 {
			t.Errorf("window %v: slo_requests %g, want %g", time.Unix(ws, 0), g, n)
		}
	}
}
