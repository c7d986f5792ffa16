// Package influxtest gives tests a real InfluxDB 1.8: the one named by
// TPSMON_TEST_INFLUX_URL (as .ci/run starts it), or else an influxd it
// starts itself on a free loopback port with a temporary data directory.
package influxtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/testkit/loopback"
)

// URL returns the base URL of a running InfluxDB, starting one if needed.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("TPSMON_TEST_INFLUX_URL"); u != "" {
		return strings.TrimRight(u, "/")
	}
	return Start(t).URL
}

// Server is an influxd of the test's own, which it may stop and start
// again (same port, same data) to play an outage.
type Server struct {
	URL string
	t   testing.TB
	bin string
	dir string
	env []string
	hc  *http.Client // nil: http.DefaultClient
	cmd *exec.Cmd
	log *os.File
}

// Start runs a new influxd on free loopback ports; it stops with the test.
// env adds INFLUXDB_* settings.
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	s := prepare(t, env...)
	s.Resume()
	return s
}

// prepare sets a server up on free loopback ports without starting it.
func prepare(t testing.TB, env ...string) *Server {
	t.Helper()
	bin, err := findInfluxd()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	httpAddr, rpcAddr := loopback.FreeAddr(t), loopback.FreeAddr(t)
	s := &Server{URL: "http://" + httpAddr, t: t, bin: bin, dir: dir, env: append(os.Environ(),
		"INFLUXDB_REPORTING_DISABLED=true",
		"INFLUXDB_BIND_ADDRESS="+rpcAddr,
		"INFLUXDB_HTTP_BIND_ADDRESS="+httpAddr,
		"INFLUXDB_HTTP_LOG_ENABLED=false",
		"INFLUXDB_META_DIR="+filepath.Join(dir, "meta"),
		"INFLUXDB_DATA_DIR="+filepath.Join(dir, "data"),
		"INFLUXDB_DATA_WAL_DIR="+filepath.Join(dir, "wal"),
		"INFLUXDB_DATA_QUERY_LOG_ENABLED=false",
		"INFLUXDB_LOGGING_LEVEL=warn",
	)}
	s.env = append(s.env, env...)
	t.Cleanup(s.Stop)
	return s
}

// Resume starts the stopped server again and waits until it answers.
func (s *Server) Resume() {
	s.t.Helper()
	logf, err := os.OpenFile(filepath.Join(s.dir, "influxd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "run")
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start influxd: %v", err)
	}
	s.cmd, s.log = cmd, logf
	if err := waitReady(s.hc, s.URL, 30*time.Second); err != nil {
		b, _ := os.ReadFile(logf.Name())
		s.t.Fatalf("%v\ninfluxd log:\n%s", err, b)
	}
}

// Stop stops the server (an outage); Resume brings it back.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
	s.log.Close()
	s.cmd = nil
}

func findInfluxd() (string, error) {
	if p, err := exec.LookPath("influxd"); err == nil {
		return p, nil
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "influxd")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("influxd not found on PATH or in $(go env GOPATH)/bin: run `make influxd` " +
		"(go install github.com/influxdata/influxdb/cmd/influxd@v1.8.10), or set TPSMON_TEST_INFLUX_URL")
}

// WaitReady polls /ping until the server answers or timeout passes.
func WaitReady(base string, timeout time.Duration) error { return waitReady(nil, base, timeout) }

func waitReady(hc *http.Client, base string, timeout time.Duration) error {
	if hc == nil {
		hc = http.DefaultClient
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := hc.Get(base + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("influxd at %s not ready after %v", base, timeout)
}

// CreateDB creates a database with a unique name and returns it.
func CreateDB(t testing.TB, base, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	Query(t, base, "", "CREATE DATABASE "+name)
	return name
}

// Query runs InfluxQL against db (epoch in seconds) and returns the series
// of its first statement.
func Query(t testing.TB, base, db, q string) []influxql.Series {
	t.Helper()
	return QueryEpoch(t, base, db, q, "s")
}

// QueryEpoch is Query with the times in epoch's unit (s, ms, …).
func QueryEpoch(t testing.TB, base, db, q, epoch string) []influxql.Series {
	t.Helper()
	v := url.Values{"q": {q}, "epoch": {epoch}}
	if db != "" {
		v.Set("db", db)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/query", strings.NewReader(v.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	series, err := influxql.Decode(body)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	return series
}

// Write writes line protocol (millisecond timestamps) to db as another
// client would, past tpsmon: a foreign write.
func Write(t testing.TB, base, db, lines string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/write?precision=ms&db="+url.QueryEscape(db), strings.NewReader(lines))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("write: HTTP %d: %s", resp.StatusCode, b)
	}
}
