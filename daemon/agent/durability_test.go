package agent

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

func TestOutageLosesNoWindow(t *testing.T) {
	t.Parallel()
	srv := influxtest.Start(t)
	db := influxtest.CreateDB(t, srv.URL, "outage")
	src := &vllmsim.Driven{Rate: 100, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)}
	vllm := httptest.NewServer(src)
	defer vllm.Close()

	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = time.Second, 200*time.Millisecond
	cfg.GPU.Interval = 200 * time.Millisecond
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: vllm.URL, GPUs: []string{"auto"}, ScrapeInterval: 100 * time.Millisecond}}
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = srv.URL, db

	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- New(cfg, Options{OpenGPU: func() (GPUSampler, error) { return gpusim.Steady{Start: start}, nil }}).Run(ctx)
	}()
	time.Sleep(1500 * time.Millisecond)
	srv.Stop() // several windows close while InfluxDB is down
	outageFrom := time.Now()
	time.Sleep(3500 * time.Millisecond)
	outageTo := time.Now()
	srv.Resume()
	// The sender finds InfluxDB back, then the daemon stops.
	time.Sleep(2 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, rows := influxtest.WindowStarts(t, srv.URL, db, "llm")
	// From the first whole second after the start: the window the test
	// starts in holds a sample only if the daemon scraped before its end,
	// which a loaded machine need not do (CI: window 05:41:56 missing,
	// the outage from 05:41:58.4).
	first, last := start.Unix()+1, time.Now().Unix()-1
	for w := first; w <= last; w++ {
		if !got[w] {
			t.Errorf("window %s missing (outage %s..%s)", time.Unix(w, 0).Format("15:04:05"),
				outageFrom.Format("15:04:05.0"), outageTo.Format("15:04:05.0"))
		}
	}
	inOutage := 0
	for w := range got {
		if w >= outageFrom.Unix() && w < outageTo.Unix() {
			inOutage++
		}
	}
	if inOutage < 3 || rows != len(got) {
		t.Errorf("%d windows from the outage, %d rows for %d windows", inOutage, rows, len(got))
	}
}

func TestPartialWriteQuarantinesOnlyBadLines(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "partial")
	cfg := configtest.Private(t)
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db
	out, stop, err := startInflux(cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatal(err)
	}
	// v is an integer first; a float v later conflicts with it.
	out.Spool.Append([]byte("conflict,host=a v=1i 1000\n"))
	out.Spool.Append([]byte("conflict,host=a v=2i 2000\nconflict,host=a v=2.5 3000\nconflict,host=a v=4i 4000\n"))
	stop()
	rows := influxtest.Query(t, base, db, "SELECT v FROM conflict")[0].Rows()
	if len(rows) != 3 {
		t.Errorf("InfluxDB holds %d rows, want the 3 good ones: %v", len(rows), rows)
	}
	q, err := os.ReadFile(filepath.Join(cfg.Sink.Spool.Dir, "quarantine", "rejected.lp"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(q), "conflict,host=a v=2.5 3000") || strings.Contains(string(q), "v=4i") ||
		!strings.Contains(string(q), "field type conflict") {
		t.Errorf("quarantine holds:\n%s", q)
	}
}

func TestTelemetryEndpoints(t *testing.T) {
	t.Parallel()
	// An InfluxDB that refuses the token: points are kept, /healthz says why.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Influxdb-Error", "authorization failed")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer refuse.Close()
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = 500*time.Millisecond, 100*time.Millisecond
	cfg.GPU.Backend, cfg.GPU.Interval = "sim", 100*time.Millisecond
	cfg.Sink.Influx.URL = refuse.URL
	addr := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- New(cfg, Options{Listening: func(a net.Addr) { addr <- a }}).Run(ctx) }()
	base := "http://" + (<-addr).String()

	// Not ready once the first windows closed and InfluxDB refused them.
	// Alive all the same: an InfluxDB outage must not get tpsmon
	// restarted by a liveness probe.
	var resp *http.Response
	var body []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err = http.Get(base + "/readyz"); err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "refuses the credentials") || time.Now().After(deadline) {
			break
		}
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "refuses the credentials") ||
		!strings.Contains(string(body), `"dropped_points"`) {
		t.Errorf("/readyz %d:\n%s", resp.StatusCode, body)
	}
	resp, err = http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status": "alive"`) {
		t.Errorf("/healthz %d:\n%s", resp.StatusCode, body)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"tpsmon_spool_points ", "tpsmon_spool_bytes ", "tpsmon_sent_points_total 0",
		"tpsmon_spool_oldest_unsent_age_seconds ", "tpsmon_quarantined_points_total 0", "tpsmon_spool_dropped_points_total 0",
		"tpsmon_write_retries_total", "tpsmon_last_write_success_timestamp_seconds 0", "tpsmon_late_samples_total"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(metrics), "tpsmon_spool_points 0\n") {
		t.Error("points were not kept while the credentials were refused")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// failingFS refuses every write to spool segments, like a full disk.
type failingFS struct{ spool.OS }

func (f failingFS) OpenFile(name string, flag int, perm fs.FileMode) (spool.File, error) {
	file, err := f.OS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, ".lps") {
		return file, err
	}
	return enospcFile{file}, nil
}

type enospcFile struct{ spool.File }

func (enospcFile) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

func TestFullDiskDaemonGoesOnCountingDrops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, fullDisk)
}

func fullDisk(t *testing.T) {
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace = 300*time.Millisecond, 50*time.Millisecond
	cfg.GPU.Backend, cfg.GPU.Interval = "sim", 50*time.Millisecond
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sp, err := spool.Open(spool.Options{Dir: cfg.Sink.Spool.Dir, FS: failingFS{}})
	if err != nil {
		t.Fatal(err)
	}
	full := sink.NewSpoolWriter(sp, &sink.Sender{Spool: sp})
	var lp bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := New(cfg, Options{Log: log, Outputs: []WindowWriter{full, sink.NewLPWriter(&lp)}}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	written := bytes.Count(lp.Bytes(), []byte("\n"))
	st := sp.Stats()
	if written < 8 || st.Dropped != uint64(written) || st.Points != 0 {
		t.Errorf("%d points emitted, spool dropped %d and holds %d: want every emitted point counted once", written, st.Dropped, st.Points)
	}
}
