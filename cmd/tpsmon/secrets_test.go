package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/sink/influxtest"
)

// TestCheckMasksCredentials: URLs with credentials (the InfluxDB URL, a
// metrics URL behind basic auth) are printed masked by check, on success
// and on failure.
func TestCheckMasksCredentials(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "secrets")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tpsmon.yaml")
	withCreds := strings.Replace(base, "://", "://admin:hunter2@", 1)
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`gpu: {backend: none}
servers: [{name: s, metrics_url: "http://scraper:hunter2@%s/metrics"}]
sink:
  influx: {url: "%s", bucket: %s}
  spool: {dir: "%s"}
`, gone, withCreds, db, filepath.Join(dir, "spool"))), 0o600)
	out, _ := runCLI(t, "check", "-c", cfgPath)
	if strings.Contains(out, "hunter2") {
		t.Errorf("check printed a password:\n%s", out)
	}
	if !strings.Contains(out, "admin:xxxxx@") || !strings.Contains(out, "scraper:xxxxx@") {
		t.Errorf("check does not show the masked URLs:\n%s", out)
	}
}

// TestLogsMaskCredentials: whatever attribute carries a URL with a
// password, a string or an error, the log shows it masked.
func TestLogsMaskCredentials(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: maskAttr}))
	log.Info("tpsmon started", "influx", "http://admin:hunter2@db:8086")
	log.Warn("influx write failed", "err", errors.New(`Post "https://u:hunter2@db:8086/api/v2/write": EOF`))
	if strings.Contains(buf.String(), "hunter2") || strings.Count(buf.String(), ":xxxxx@") != 2 {
		t.Errorf("log:\n%s", buf.String())
	}
}
