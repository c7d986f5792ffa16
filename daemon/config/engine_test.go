package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/collector/engine"
)

// Servers' engines are checked against the one registry: a name or an
// alias (kept as the name), what the engine serves matched against what
// the server is read from, unknown names answered with the known ones.
func TestServerEngine(t *testing.T) {
	const metrics = `metrics_url: "http://127.0.0.1:8000/metrics"`
	const log = `log: {file: /var/log/x.log}`
	tests := []struct {
		name, server string
		want         string // the engine kept
		err          error
		says         []string
	}{
		{"auto with metrics", metrics, "auto", nil, nil},
		{"no engine is auto", log, "auto", nil, nil},
		{"ollama from its log", "engine: ollama, " + log, "ollama", nil, nil},
		{"ollama has no metrics", "engine: ollama, " + metrics, "", engine.ErrNoMetrics, []string{"servers[0].metrics_url", "ollama", "log"}},
		{"nim from metrics", "engine: nim, " + metrics, "nim", nil, nil},
		{"triton from its log", "engine: triton, " + log, "triton", nil, nil},
		{"an alias is kept as the name", "engine: llama.cpp, " + metrics, "llamacpp", nil, nil},
		{"unknown", "engine: vllm2, " + metrics, "", engine.ErrUnknown, append([]string{"servers[0].engine", "vllm2"}, engine.Names()...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tpsmon.yaml")
			if err := os.WriteFile(p, []byte("servers: [{name: s, "+tc.server+"}]\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(p, true, nil)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err != nil {
				for _, w := range tc.says {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if got := cfg.Servers[0].Engine; got != tc.want {
				t.Errorf("engine %q, want %q", got, tc.want)
			}
		})
	}
}
