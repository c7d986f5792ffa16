package main

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// report and rollup reach an InfluxDB behind TLS with a private CA as the
// writer does, through sink.influx.tls: the real InfluxDB serves HTTPS with
// a certificate only the configured CA file vouches for.
func TestReportAndRollupUseTheSinksTLS(t *testing.T) {
	srv, ca, hc := influxtest.StartTLS(t)
	const db = "reporttls"
	for _, q := range []string{`CREATE DATABASE "reporttls"`,
		`CREATE RETENTION POLICY "tpsmon_1h" ON "reporttls" DURATION 400d REPLICATION 1`,
		`CREATE RETENTION POLICY "tpsmon_1d" ON "reporttls" DURATION 400d REPLICATION 1`} {
		resp, err := hc.PostForm(srv.URL+"/query", url.Values{"q": {q}})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %v %v", q, err, resp)
		}
		resp.Body.Close()
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.yaml")
	withCA := filepath.Join(dir, "ca.yaml")
	sink := "sink:\n  influx:\n    url: " + srv.URL + "\n    bucket: " + db + "/autogen\n"
	os.WriteFile(plain, []byte(sink), 0o600)
	os.WriteFile(withCA, []byte(sink+"    tls:\n      ca_file: "+ca+"\n"), 0o600)
	for _, args := range [][]string{{"report", "--since", "1h", "--format", "json"}, {"rollup"}} {
		t.Run(args[0], func(t *testing.T) {
			if _, err := runCLI(t, append(args, "-c", plain)...); err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("without the CA: %v, want a certificate error", err)
			}
			if out, err := runCLI(t, append(args, "-c", withCA)...); err != nil {
				t.Errorf("with sink.influx.tls.ca_file: %v\n%.400s", err, out)
			}
		})
	}
}
