package main

import (
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
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

// TestCheckMasksQuerySecrets: a token in a metrics URL's query string is
// masked in check's lines, the one that prints the URL on success and the
// one that quotes net/http's error (url.Error holds the whole URL).
func TestCheckMasksQuerySecrets(t *testing.T) {
	srv := httptest.NewServer(&vllmsim.Driven{Rate: 10, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	defer srv.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	cfgPath := filepath.Join(t.TempDir(), "tpsmon.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`gpu: {backend: none}
servers:
  - {name: up, metrics_url: "%s/metrics?api_key=hunter2&format=text"}
  - {name: down, metrics_url: "http://%s/metrics?access_token=hunter2"}
  - {name: odd, metrics_url: "http://%s/metrics?X-Auth-Token=hunter2"}
`, srv.URL, gone, gone)), 0o600)
	out, _ := runCLI(t, "check", "-c", cfgPath)
	if strings.Contains(out, "hunter2") {
		t.Errorf("check printed a token:\n%s", out)
	}
	for _, w := range []string{"/metrics?api_key=xxxxx&format=text", "/metrics?access_token=xxxxx", "/metrics?X-Auth-Token=xxxxx"} {
		if !strings.Contains(out, w) {
			t.Errorf("check does not show %s:\n%s", w, out)
		}
	}
}
