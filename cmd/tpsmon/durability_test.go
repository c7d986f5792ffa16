package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/influxtest"
	"github.com/tpsmon/tpsmon/sink/spool"
)

// windowStarts returns the distinct window starts (Unix seconds) of the
// server's points and how many rows there were.
func windowStarts(t *testing.T, base, db string) (map[int64]bool, int) {
	t.Helper()
	series := influxtest.Query(t, base, db, `SELECT tokens, coverage FROM tpsmon_server WHERE "server" = 'llm'`)
	got := map[int64]bool{}
	if len(series) == 0 {
		return got, 0
	}
	rows := series[0].Rows()
	for _, r := range rows {
		got[int64(num(t, r["time"]))] = true
	}
	return got, len(rows)
}

func TestOutageLosesNoWindow(t *testing.T) {
	srv := influxtest.Start(t)
	db := influxtest.CreateDB(t, srv.URL, "outage")
	src := &drivenVLLM{rate: 100, start: time.Now(), resetAt: time.Now().Add(time.Hour)}
	vllm := httptest.NewServer(src)
	defer vllm.Close()

	cfg := testConfig(t)
	cfg.Window, cfg.Grace = time.Second, 200*time.Millisecond
	cfg.GPU.Interval = 200 * time.Millisecond
	cfg.Servers = []ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: vllm.URL, GPUs: []string{"auto"}, ScrapeInterval: 100 * time.Millisecond}}
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = srv.URL, db

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runDaemon(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
			daemonOpts{openGPU: func() (gpuSampler, error) { return steadyGPUs{start: start}, nil }})
	}()
	time.Sleep(2 * time.Second)
	srv.Stop() // several windows close while InfluxDB is down
	outageFrom := time.Now()
	time.Sleep(4 * time.Second)
	outageTo := time.Now()
	srv.Resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, rows := windowStarts(t, srv.URL, db)
	first, last := start.Unix(), time.Now().Unix()-1
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

// proc is a tpsmon process of the test.
type proc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
}

func startDaemon(t *testing.T, bin, cfgPath string) *proc {
	t.Helper()
	d := &proc{cmd: exec.Command(bin, "run", "--config", cfgPath)}
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return d
}

func buildTpsmon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tpsmon")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func TestKilledAndRestartedLosesNothingSpooled(t *testing.T) {
	bin := buildTpsmon(t)
	srv := influxtest.Start(t)
	db := influxtest.CreateDB(t, srv.URL, "crash")
	src := &drivenVLLM{rate: 100, start: time.Now(), resetAt: time.Now().Add(time.Hour)}
	vllm := httptest.NewServer(src)
	defer vllm.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tpsmon.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`host: crash-node
window: 1s
grace: 200ms
gpu: {backend: sim, interval: 200ms}
servers:
  - name: llm
    engine: vllm
    metrics_url: %s
    scrape_interval: 100ms
sink:
  influx: {url: %s, bucket: %s}
  spool: {dir: %s}
http: {listen: "127.0.0.1:0"}
`, vllm.URL, srv.URL, db, filepath.Join(dir, "state"))), 0o600)

	// The first process writes while InfluxDB is down, so everything it
	// closes is in its spool when it is killed.
	srv.Stop()
	first := startDaemon(t, bin, cfgPath)
	time.Sleep(3500 * time.Millisecond)
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.cmd.Wait()
	killed := time.Now()
	// Restart in a later window, with InfluxDB back.
	time.Sleep(time.Until(killed.Truncate(time.Second).Add(1300 * time.Millisecond)))
	srv.Resume()
	second := startDaemon(t, bin, cfgPath)
	time.Sleep(2500 * time.Millisecond)
	second.cmd.Process.Signal(syscall.SIGTERM)
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second process: %v\n%s", err, second.stderr.String())
	}

	// The restarted process says which windows nobody observed: from the
	// end of the last window the killed process closed to the window the
	// new one started in.
	log := second.stderr.String()
	m := regexp.MustCompile(`windows not observed.* from=(\S+) to=(\S+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("restart did not report unobserved windows:\n%s", log)
	}
	from, _ := time.Parse(time.RFC3339, m[1])
	to, _ := time.Parse(time.RFC3339, m[2])
	if from.After(killed) || !to.Equal(killed.Truncate(time.Second).Add(time.Second)) {
		t.Errorf("reported gap %s..%s, kill at %s", m[1], m[2], killed.Format(time.RFC3339Nano))
	}
	got, rows := windowStarts(t, srv.URL, db)
	fm := regexp.MustCompile(`first window" start=(\S+)`).FindStringSubmatch(first.stderr.String())
	if fm == nil {
		t.Fatalf("first process did not log its first window:\n%s", first.stderr.String())
	}
	firstWindow, _ := time.Parse(time.RFC3339Nano, fm[1])
	spooled := 0
	for w := firstWindow.Unix(); w < from.Unix(); w++ {
		spooled++
		if !got[w] {
			t.Errorf("window %s, closed and spooled before the kill, is missing", time.Unix(w, 0).Format("15:04:05"))
		}
	}
	if spooled < 2 {
		t.Fatalf("only %d windows closed before the kill", spooled)
	}
	for w := from.Unix(); w < to.Unix(); w++ {
		if got[w] {
			t.Errorf("window %d was reported unobserved but written", w)
		}
	}
	if !got[to.Unix()] {
		t.Errorf("the restarted process wrote no window at %s", m[2])
	}
	if rows != len(got) {
		t.Errorf("%d rows for %d windows", rows, len(got))
	}
	if !strings.Contains(log, "spool: resuming") {
		t.Errorf("restart did not resume the spool:\n%s", log)
	}
}

func TestPartialWriteQuarantinesOnlyBadLines(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "partial")
	cfg := testConfig(t)
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db
	out, stop, err := startInflux(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	// v is an integer first; a float v later conflicts with it.
	out.spool.Append([]byte("conflict,host=a v=1i 1000\n"))
	out.spool.Append([]byte("conflict,host=a v=2i 2000\nconflict,host=a v=2.5 3000\nconflict,host=a v=4i 4000\n"))
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
	// An InfluxDB that refuses the token: points are kept, /healthz says why.
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Influxdb-Error", "authorization failed")
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer refuse.Close()
	cfg := testConfig(t)
	cfg.Window, cfg.Grace = 500*time.Millisecond, 100*time.Millisecond
	cfg.GPU.Backend, cfg.GPU.Interval = "sim", 100*time.Millisecond
	cfg.Sink.Influx.URL = refuse.URL
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	out, stop, err := startInflux(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p := &pipeline{cfg: cfg, log: log, outputs: []pointWriter{out}, openGPU: openBackend(cfg, nil)}
	tel := &telemetry{p: p, spool: out.spool, sender: out.sender}
	h := httptest.NewServer(tel.handler())
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p.run(ctx)
	out.sender.Flush(context.Background())

	resp, err := http.Get(h.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "refuses the credentials") {
		t.Errorf("/healthz %d:\n%s", resp.StatusCode, body)
	}
	resp, err = http.Get(h.URL + "/metrics")
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
	if st := out.spool.Stats(); st.Points == 0 {
		t.Error("points were not kept while the credentials were refused")
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
	cfg := testConfig(t)
	cfg.Window, cfg.Grace = 300*time.Millisecond, 50*time.Millisecond
	cfg.GPU.Backend, cfg.GPU.Interval = "sim", 50*time.Millisecond
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sp, err := spool.Open(spool.Options{Dir: cfg.Sink.Spool.Dir, FS: failingFS{}})
	if err != nil {
		t.Fatal(err)
	}
	full := &influxOutput{enc: sink.NewEncoder(), spool: sp, sender: &sink.Sender{Spool: sp}}
	var lp bytes.Buffer
	p := &pipeline{cfg: cfg, log: log, outputs: []pointWriter{full, newLPOutput(&lp)}, openGPU: openBackend(cfg, nil)}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := p.run(ctx); err != nil {
		t.Fatal(err)
	}
	written := bytes.Count(lp.Bytes(), []byte("\n"))
	st := sp.Stats()
	if written < 8 || st.Dropped != uint64(written) || st.Points != 0 {
		t.Errorf("%d points emitted, spool dropped %d and holds %d: want every emitted point counted once", written, st.Dropped, st.Points)
	}
}
