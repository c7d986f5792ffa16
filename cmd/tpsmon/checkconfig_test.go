package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckSaysWhichConfig: check's first line says what it checked. A
// file at the default path is ok, none there is a note that the defaults
// are in use (never ok for a file that is not there), and a --config that
// does not exist fails.
func TestCheckSaysWhichConfig(t *testing.T) {
	t.Setenv("TPSMON_GPU_BACKEND", "none")
	t.Setenv("TPSMON_DISCOVERY_ENABLED", "false")
	dir := t.TempDir()
	missing := filepath.Join(dir, "tpsmon.yaml")
	tests := []struct {
		name     string
		defPath  string
		args     []string
		first    string // check's first line
		rejected bool   // check fails on the configuration
	}{
		{"default path, no file", missing, nil, "note  config " + missing + ": no such file; running on the defaults (and TPSMON_* variables, flags)", false},
		{"default path, a file", "testdata/good.yaml", nil, "ok    config testdata/good.yaml", false},
		{"explicit, no file", missing, []string{"-c", missing}, "FAIL  config " + missing + ": open " + missing + ": no such file or directory", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func(p string) { defaultConfig = p }(defaultConfig)
			defaultConfig = tc.defPath
			out, err := runCLI(t, append([]string{"check"}, tc.args...)...)
			first, _, _ := strings.Cut(out, "\n")
			if first != tc.first {
				t.Errorf("first line %q, want %q\n%s", first, tc.first, out)
			}
			if rejected := err != nil && strings.Contains(err.Error(), "configuration is invalid"); rejected != tc.rejected {
				t.Errorf("check err = %v, want the configuration rejected: %v", err, tc.rejected)
			}
		})
	}
}
