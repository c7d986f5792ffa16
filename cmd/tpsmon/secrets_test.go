package main

import (
	"fmt"
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
