// Package victoriatest gives tests a real VictoriaMetrics single-node
// server (the Prometheus-model store tpsmon's numeric profile, /metrics
// and OTLP are for): started on free loopback ports with a temporary
// data directory, stopped and started again to play an outage, and read
// through its Prometheus query API.
package victoriatest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/testkit/loopback"
)

// BinEnv names the victoria-metrics binary when it is not on PATH or in
// $(go env GOPATH)/bin.
const BinEnv = "TPSMON_TEST_VICTORIA_METRICS"

// Server is a victoria-metrics of the test's own.
type Server struct {
	URL  string
	t    testing.TB
	bin  string
	dir  string
	args []string
	cmd  *exec.Cmd
	log  *os.File
	// exited closes when cmd has been waited for.
	exited chan struct{}
}

// Start runs a new victoria-metrics on a free loopback port; it stops
// with the test. flags add command-line flags (Scrape's, for one).
func Start(t testing.TB, flags ...string) *Server {
	t.Helper()
	bin, err := findBin()
	if err != nil {
		// As influxtest: a test that needs the store fails without it,
		// in CI above all, which builds it (make victoria-metrics).
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := loopback.FreeAddr(t)
	s := &Server{URL: "http://" + addr, t: t, bin: bin, dir: dir, args: append([]string{
		"-storageDataPath=" + filepath.Join(dir, "data"),
		"-httpListenAddr=" + addr,
		"-loggerLevel=WARN",
		// Points are readable as soon as they are flushed (Flush): no
		// 30 s hold-back of the newest, no cached answers.
		"-search.latencyOffset=0s",
		"-search.disableCache",
		// Window starts a year back (replayed fixtures) are kept.
		"-retentionPeriod=100y",
	}, flags...)}
	t.Cleanup(s.Stop)
	s.Resume()
	return s
}

// Scrape writes a Prometheus scrape configuration for targets (host:port,
// /metrics) at interval and returns the flag that loads it. The
// timestamps the targets give are kept (honor_timestamps: VictoriaMetrics
// replaces them with the scrape's time by default).
func Scrape(t testing.TB, interval time.Duration, targets ...string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "scrape_configs:\n- job_name: tpsmon\n  scrape_interval: %s\n  honor_timestamps: true\n  static_configs:\n  - targets:\n", interval)
	for _, tg := range targets {
		fmt.Fprintf(&b, "    - %q\n", tg)
	}
	p := filepath.Join(t.TempDir(), "scrape.yml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return "-promscrape.config=" + p
}

// Resume starts the stopped server again (same port, same data) and waits
// until it is healthy.
func (s *Server) Resume() {
	s.t.Helper()
	logf, err := os.OpenFile(filepath.Join(s.dir, "victoria-metrics.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("start victoria-metrics: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.log, s.exited = cmd, logf, exited
	if err := waitHealthy(s.URL, 30*time.Second, exited); err != nil {
		b, _ := os.ReadFile(logf.Name())
		s.t.Fatalf("%v\nvictoria-metrics log:\n%s", err, b)
	}
}

// Stop stops the server (an outage); Resume brings it back. It is
// stopped as a service manager would, so what it took is on disk.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	s.log.Close()
	s.cmd = nil
}

func findBin() (string, error) {
	if p := os.Getenv(BinEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", BinEnv, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("victoria-metrics"); err == nil {
		return p, nil
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "victoria-metrics")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("victoria-metrics not found on PATH, in $(go env GOPATH)/bin or in $%s: run `make victoria-metrics` "+
		"(go install github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@VERSION, the Makefile's)", BinEnv)
}

// waitHealthy polls /health until it answers OK, the process exits or
// timeout passes.
func waitHealthy(base string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("victoria-metrics at %s exited before it was healthy", base)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("victoria-metrics at %s not healthy after %v", base, timeout)
}

// Flush makes every point taken so far readable (/internal/force_flush).
func (s *Server) Flush(t testing.TB) {
	t.Helper()
	s.get(t, "/internal/force_flush", nil)
}

// Sample is one stored value at its timestamp (milliseconds).
type Sample struct {
	T time.Time
	V float64
}

// Series is a time series: its labels (__name__ included) and samples.
type Series struct {
	Labels  map[string]string
	Samples []Sample
}

// Raw returns every sample stored for the series selector matches within
// the last lookback before at, as the Prometheus query API gives a range
// vector: raw samples, duplicates included, no staleness lookback. It
// flushes first.
func (s *Server) Raw(t testing.TB, selector string, at time.Time, lookback time.Duration) []Series {
	t.Helper()
	s.Flush(t)
	q := fmt.Sprintf("%s[%dms]", selector, lookback.Milliseconds())
	body := s.get(t, "/api/v1/query", url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1e3, 'f', 3, 64)}})
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("query %s: %v: %s", q, err, body)
	}
	if r.Status != "success" || r.Data.ResultType != "matrix" {
		t.Fatalf("query %s: status %s, result %s: %s", q, r.Status, r.Data.ResultType, r.Error)
	}
	out := make([]Series, 0, len(r.Data.Result))
	for _, res := range r.Data.Result {
		ser := Series{Labels: res.Metric, Samples: make([]Sample, 0, len(res.Values))}
		for _, p := range res.Values {
			ts, ok1 := p[0].(float64)
			vs, ok2 := p[1].(string)
			v, err := strconv.ParseFloat(vs, 64)
			if !ok1 || !ok2 || err != nil {
				t.Fatalf("query %s: sample %v of %v: not [seconds, \"value\"]", q, p, res.Metric)
			}
			ser.Samples = append(ser.Samples, Sample{T: time.UnixMilli(int64(math.Round(ts * 1e3))), V: v})
		}
		out = append(out, ser)
	}
	return out
}

func (s *Server) get(t testing.TB, path string, q url.Values) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := s.URL + path
	if q != nil {
		u += "?" + q.Encode()
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("victoria-metrics %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("victoria-metrics %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("victoria-metrics %s: HTTP %d: %s", path, resp.StatusCode, b)
	}
	return b
}

// Precision bounds how far a float read back may be from the one written,
// relative to it: VictoriaMetrics stores values as decimals of about 12
// significant digits (its lib/decimal converts at 1e12), integers
// exactly. A store that gives back less is not equal.
const Precision = 1e-11

// RelDiff is |a-b| over the larger magnitude; 0 when they are equal.
func RelDiff(a, b float64) float64 {
	if a == b {
		return 0
	}
	return math.Abs(a-b) / max(math.Abs(a), math.Abs(b))
}
