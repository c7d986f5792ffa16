package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigBounds: every out-of-range value the issue tried is refused,
// with a one-line message naming the key and what it accepts.
func TestConfigBounds(t *testing.T) {
	server := "servers: [{name: s, metrics_url: \"http://127.0.0.1:8000/metrics\"}]\n"
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"gpu interval 1us", "gpu: {interval: 1us}\n", []string{"gpu.interval", "at least 10ms"}},
		{"scrape interval 1us", "servers: [{name: s, metrics_url: \"http://127.0.0.1:8000/metrics\", scrape_interval: 1us}]\n", []string{"servers[0].scrape_interval", "at least 10ms"}},
		{"NaN threshold", "thresholds: {kv_bound: .nan}\n", []string{"thresholds.kv_bound", "(0, 1]"}},
		{"infinite threshold", "thresholds: {saturated_util: .inf}\n", []string{"thresholds.saturated_util", "[0, 100]"}},
		{"infinite waiting", "thresholds: {waiting: .inf}\n", []string{"thresholds.waiting"}},
		{"acceptance over 1", "thresholds: {spec_accept: 1.5}\n", []string{"thresholds.spec_accept", "[0, 1]"}},
		{"port 99999999", "discovery: {ports: [99999999]}\n", []string{"discovery.ports[0]", "1-65535"}},
		{"port -1", "discovery: {ports: [-1]}\n", []string{"discovery.ports[0]", "1-65535"}},
		{"listen port", "http: {listen: \"127.0.0.1:99999\"}\n", []string{"http.listen", "0-65535"}},
		{"max connections 0", "http: {max_connections: 0}\n", []string{"http.max_connections", "between 1 and 65536"}},
		{"influx url port", "sink: {influx: {url: \"http://127.0.0.1:99999\"}}\n", []string{"sink.influx.url", "1-65535"}},
		{"unknown sink profile", "sink: {influx: {profile: prometheus}}\n", []string{"sink.influx.profile", "prometheus", "influx, numeric"}},
		{"host of 1 MB", "host: " + strings.Repeat("h", 1<<20) + "\n", []string{"host", "at most 253"}},
		{"1h grace on a 1s window", "window: 1s\ngrace: 1h\n", []string{"grace", "10 windows or a minute"}},
		{"max_bytes 1e30GiB", "sink: {spool: {max_bytes: 1e30GiB}}\n", []string{"max_bytes", "too large", "1PiB"}},
		{"quarantine_max_bytes 1KiB", "sink: {spool: {quarantine_max_bytes: 1KiB}}\n", []string{"sink.spool.quarantine_max_bytes", "at least 4MiB"}},
		{"window 2562047h", "window: 2562047h\n", []string{"window", "at most 1h"}},
		{"empty file", "# nothing here\n\n", []string{"empty"}},
		{"unknown top-level key", "windw: 10s\n", []string{"unknown top-level key", "windw"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tpsmon.yaml")
			body := tc.yaml
			if !strings.Contains(body, "servers:") && tc.name != "empty file" {
				body += server
			}
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p, true, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if len(msg) > 400 || strings.Contains(msg, "\n") {
				t.Errorf("message is not one short line (%d bytes)", len(msg))
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not say %q", msg, w)
				}
			}
		})
	}
}

// TestUnknownEnvNamed: a TPSMON_ variable that names no key is listed.
func TestUnknownEnvNamed(t *testing.T) {
	t.Setenv("TPSMON_WINDOWS", "5s")
	t.Setenv("TPSMON_GRACE", "2s")
	got := UnknownEnv()
	if len(got) != 1 || got[0] != "TPSMON_WINDOWS" {
		t.Errorf("unknown variables %v, want [TPSMON_WINDOWS]", got)
	}
}
