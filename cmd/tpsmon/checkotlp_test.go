package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckProbesOTLP: with sink.otlp.endpoint, check sends an export of
// no points and says whether the receiver took it, with the headers
// configured; the header's value is never printed.
func TestCheckProbesOTLP(t *testing.T) {
	defer func(p string) { defaultConfig = p }(defaultConfig)
	defaultConfig = filepath.Join(t.TempDir(), "tpsmon.yaml") // none: the defaults and the variables
	t.Setenv("TPSMON_GPU_BACKEND", "none")
	t.Setenv("TPSMON_DISCOVERY_ENABLED", "false")
	t.Setenv("TPSMON_SINK_SPOOL_DIR", t.TempDir())
	t.Setenv("TPSMON_SINK_FILE_PATH", "none")
	t.Setenv("TPSMON_SINK_OTLP_HEADERS", "Authorization: Bearer s3cret")
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/metrics" || r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "who are you", http.StatusUnauthorized)
		}
	}))
	defer rcv.Close()
	for _, c := range []struct{ endpoint, want string }{
		{rcv.URL, "ok    otlp " + rcv.URL + "/v1/metrics: reachable, an empty export accepted"},
		{rcv.URL + "/elsewhere", "FAIL  otlp export: HTTP 401"},
	} {
		t.Setenv("TPSMON_SINK_OTLP_ENDPOINT", c.endpoint)
		out, _ := runCLI(t, "check")
		if !strings.Contains(out, c.want) || strings.Contains(out, "s3cret") {
			t.Errorf("%s: check says\n%s\nwant a line %q, no header value", c.endpoint, out, c.want)
		}
	}
}
