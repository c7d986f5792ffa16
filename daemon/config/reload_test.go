package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// running is the file a daemon of TestCheckReload runs on.
const running = `gpu: {backend: sim, interval: 50ms}
servers:
  - {name: a, metrics_url: "http://127.0.0.1:8000/metrics"}
  - {name: b, metrics_url: "http://127.0.0.1:8001/metrics"}
sink:
  influx: {url: "http://127.0.0.1:8086", bucket: tpsmon/autogen}
log: {level: debug}
`

// TestCheckReload: a reload may change any value, remove list entries
// and add keys; it may not drop a key the running file sets.
func TestCheckReload(t *testing.T) {
	tests := []struct {
		name          string
		running, next string // "": no file at the default path
		dropped       []string
	}{
		{"same file", running, running, nil},
		{"an empty mapping", running, "{}\n", []string{"gpu.backend", "gpu.interval", "log.level", "servers", "sink.influx.bucket", "sink.influx.url"}},
		{"truncated after gpu:", running, "gpu:\n", []string{"gpu.backend", "gpu.interval", "log.level", "servers", "sink.influx.bucket", "sink.influx.url"}},
		{"truncated in sink", running, strings.Split(running, "  influx:")[0], []string{"log.level", "sink.influx.bucket", "sink.influx.url"}},
		{"a server removed", running, strings.Replace(running, "  - {name: b, metrics_url: \"http://127.0.0.1:8001/metrics\"}\n", "", 1), nil},
		{"every server removed, explicitly", running,
			"gpu: {backend: sim, interval: 50ms}\nservers: []\nsink:\n  influx: {url: \"http://127.0.0.1:8086\", bucket: tpsmon/autogen}\nlog: {level: debug}\n", nil},
		{"the backend changed, explicitly", running, strings.Replace(running, "backend: sim", "backend: none", 1), nil},
		{"a key added", running, running + "window: 20s\n", nil},
		{"gpu: null filled in", "gpu:\nlog: {level: info}\n", "gpu: {backend: none}\nlog: {level: info}\n", nil},
		{"a key dropped", running, strings.Replace(running, ", interval: 50ms", "", 1), []string{"gpu.interval"}},
		{"no file, then one", "", "{}\n", nil},
		{"the file removed", running, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "tpsmon.yaml")
			load := func(body string) *Config {
				t.Helper()
				os.Remove(path)
				if body != "" {
					if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				// As the daemon at the default path: a missing file is no error.
				c, err := Load(path, false, nil)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			old := load(tc.running)
			next := load(tc.next)
			err := CheckReload(old, next)
			gone := tc.running != "" && tc.next == ""
			switch {
			case len(tc.dropped) == 0 && !gone:
				if err != nil {
					t.Errorf("refused: %v", err)
				}
			case err == nil:
				t.Errorf("accepted, want %v refused", tc.dropped)
			case !errors.Is(err, ErrReloadDropsKeys):
				t.Errorf("error %v is not ErrReloadDropsKeys", err)
			case gone && !strings.Contains(err.Error(), path+" is gone"):
				t.Errorf("error %q does not say the file is gone", err)
			case !gone && !strings.Contains(err.Error(), "no longer sets "+strings.Join(tc.dropped, ", ")+";"):
				t.Errorf("error %q does not name exactly %v", err, tc.dropped)
			}
		})
	}
}

// TestFileSaysWhatWasRead: File is the file read, "" when the default
// path held none.
func TestFileSaysWhatWasRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tpsmon.yaml")
	c, err := Load(path, false, nil)
	if err != nil || c.File() != "" {
		t.Fatalf("no file: File() = %q, err %v; want \"\", nil", c.File(), err)
	}
	if _, err := Load(path, true, nil); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a missing explicit file: err %v, want it named", err)
	}
	os.WriteFile(path, []byte("gpu: {backend: none}\n"), 0o600)
	if c, err := Load(path, false, nil); err != nil || c.File() != path {
		t.Errorf("File() = %q, err %v; want %q", c.File(), err, path)
	}
}
