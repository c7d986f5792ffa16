package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		{"otlp endpoint scheme", "sink: {otlp: {endpoint: \"collector:4318\"}}\n", []string{"sink.otlp.endpoint", "http:// or https://"}},
		{"otlp timeout 0", "sink: {otlp: {timeout: 0s}}\n", []string{"sink.otlp.timeout", "positive"}},
		{"otlp header without colon", "sink: {otlp: {headers: [\"Authorization Bearer s3cret\"]}}\n", []string{"sink.otlp.headers", "entry 1", "Name: value"}},
		{"otlp header name", "sink: {otlp: {headers: [\"X Tenant: a\"]}}\n", []string{"sink.otlp.headers", "not a header name"}},
		{"otlp header twice", "sink: {otlp: {headers: [\"x-tenant: a\", \"X-Tenant: b\"]}}\n", []string{"sink.otlp.headers", "given twice"}},
		{"host of 1 MB", "host: " + strings.Repeat("h", 1<<20) + "\n", []string{"host", "at most 253"}},
		{"1h grace on a 1s window", "window: 1s\ngrace: 1h\n", []string{"grace", "10 windows or a minute"}},
		{"max_bytes 1e30GiB", "sink: {spool: {max_bytes: 1e30GiB}}\n", []string{"max_bytes", "too large", "1PiB"}},
		{"quarantine_max_bytes 1KiB", "sink: {spool: {quarantine_max_bytes: 1KiB}}\n", []string{"sink.spool.quarantine_max_bytes", "at least 4MiB"}},
		{"window 2562047h", "window: 2562047h\n", []string{"window", "at most 1h"}},
		{"empty file", "# nothing here\n\n", []string{"empty"}},
		{"unknown top-level key", "windw: 10s\n", []string{"unknown top-level key", "windw"}},
		{"negative tpot", "slo: {tpot: -100ms}\n", []string{"slo.tpot", "negative"}},
		{"a day's ttft", "slo: {ttft: 24h}\n", []string{"slo.ttft", "longer than 1h"}},
		{"bare number ttft", "slo: {ttft: 2}\n", []string{"slo.ttft"}},
		{"NaN floor", "slo: {ttft: 2s, floor: .nan}\n", []string{"slo.floor", "[0, 1]"}},
		{"floor 95", "slo: {ttft: 2s, floor: 95}\n", []string{"slo.floor", "[0, 1]"}},
		{"floor without objective", "slo: {floor: 0.9}\n", []string{"slo.floor", "without an objective"}},
		{"server's negative e2e", "servers: [{name: s, metrics_url: \"http://127.0.0.1:8000/metrics\", slo: {e2e: -1s}}]\n", []string{"servers[0].slo.e2e", "negative"}},
		{"relative hub cache", "servers: [{name: s, metrics_url: \"http://127.0.0.1:8000/metrics\", roofline: {hf_hub_dirs: [hf/hub]}}]\n", []string{"servers[0].roofline.hf_hub_dirs", `"hf/hub"`, "absolute"}},
		{"hub cache with ..", "servers: [{name: s, metrics_url: \"http://127.0.0.1:8000/metrics\", roofline: {hf_hub_dirs: [/srv/../root]}}]\n", []string{"servers[0].roofline.hf_hub_dirs", "without a .. element"}},
		{"server's unknown slo key", "servers: [{name: s, metrics_url: \"http://127.0.0.1:8000/metrics\", slo: {tfft: 1s}}]\n", []string{"tfft"}},
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
			if strings.Contains(msg, "s3cret") {
				t.Errorf("error %q shows a header's value", msg)
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

// TestSLOConfig: the default objective applies to servers without their
// own, a server's own replaces it whole.
func TestSLOConfig(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tpsmon.yaml")
	body := "slo: {ttft: 2s, tpot: 100ms, floor: 0.9}\nservers:\n" +
		"  - {name: a, metrics_url: \"http://127.0.0.1:8000/metrics\"}\n" +
		"  - {name: b, metrics_url: \"http://127.0.0.1:8001/metrics\", slo: {e2e: 30s}}\n"
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	def, per := c.SLOs()
	if def.TTFT != 2*time.Second || def.TPOT != 100*time.Millisecond || def.E2E != 0 || def.Floor != 0.9 {
		t.Errorf("default %+v", def)
	}
	if _, ok := per["a"]; ok {
		t.Errorf("server a has its own objective: %+v", per["a"])
	}
	if b := per["b"].SLO; b == nil || b.E2E != 30*time.Second || b.TTFT != 0 || b.Floor != 0 {
		t.Errorf("server b's objective: %+v", b)
	}
}
