package accuracy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/testkit/tokentruth"
)

// loadedFrac marks a window as loaded when its true token count is at
// least this share of the busiest window's.
const loadedFrac = 0.25

// TestReplayRealRecordings replays recordings of a real llama-server and a
// real Ollama and holds every window to the clients' token arrivals.
func TestReplayRealRecordings(t *testing.T) {
	llama := filepath.Join("testdata", "llamacpp-run1")
	cases := []struct {
		name string
		// arrivals are the token arrivals the source can see.
		arrivals []string
		args     func(t *testing.T) []string
		// maxMean and maxTotal bound the mean per-window error over loaded
		// windows and the error of the total.
		maxMean, maxTotal float64
		// wantWarn is said on stderr (cancelled requests the log cannot see).
		wantWarn              string
		wantEngine, wantModel string
	}{
		{name: "llamacpp metrics", arrivals: []string{"llamacpp-run1/arrivals.txt.gz", "llamacpp-run1/arrivals-cancelled.txt.gz"}, maxMean: 0.05, maxTotal: 0.005,
			args: func(t *testing.T) []string {
				return []string{"--metrics-dir", filepath.Join(llama, "metrics")}
			}},
		{name: "llamacpp docker-stamped log", arrivals: []string{"llamacpp-run1/arrivals.txt.gz"}, maxMean: 0.03,
			args: func(t *testing.T) []string {
				return []string{"--log", gunzip(t, "llamacpp-run1/server-stderr-ts.log.gz")}
			}, wantWarn: "83 requests were cancelled"},
		{name: "llamacpp log with process-relative stamps", arrivals: []string{"llamacpp-run1/arrivals.txt.gz"},
			maxMean: 0.03, args: func(t *testing.T) []string {
				// The earliest read time minus stamp over the docker-stamped copy.
				return []string{"--log", gunzip(t, "llamacpp-run1/server.log.gz"), "--started-at", "2026-11-30T08:41:43.85Z"}
			}, wantWarn: "83 requests were cancelled", wantEngine: "llamacpp", wantModel: "med-llama-rand"},
		{name: "ollama log, timing lines placed by their [GIN] lines", arrivals: []string{"ollama-default/arrivals.txt.gz"},
			maxMean: 0.05, maxTotal: 0.005, args: func(t *testing.T) []string {
				return []string{"--log", gunzip(t, "ollama-default/ollama.log.gz")}
			}, wantEngine: "ollama", wantModel: "randnb:latest"},
		{name: "ollama log of a model with a template: no line at request start", arrivals: []string{"ollama-default/arrivals.txt.gz"},
			maxMean: 0.05, maxTotal: 0.005, args: func(t *testing.T) []string {
				// Without the per-request WARN line only the [GIN] line's
				// second and duration are left.
				return []string{"--log", without(t, gunzip(t, "ollama-default/ollama.log.gz"), "level=WARN")}
			}, wantEngine: "ollama"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var truth tokentruth.Arrivals
			for _, a := range c.arrivals {
				more, err := tokentruth.LoadCompact(filepath.Join("testdata", a))
				if err != nil {
					t.Fatal(err)
				}
				truth = append(truth, more...)
			}
			truth = truth.Sorted()
			pts, stderr := replayed(t, append(c.args(t), "--window", "10s")...)
			rep := tokentruth.Compare(truth, windows(t, pts), 10*time.Second, loadedFrac)
			t.Logf("%s\n%s", stderr, rep)
			if rep.Loaded < 6 {
				t.Fatalf("only %d loaded windows", rep.Loaded)
			}
			if rep.MeanErr > c.maxMean {
				t.Errorf("mean per-window error %.2f%%, want at most %.1f%%", 100*rep.MeanErr, 100*c.maxMean)
			}
			if !strings.Contains(stderr, c.wantWarn) {
				t.Errorf("stderr %q does not say %q", stderr, c.wantWarn)
			}
			for _, p := range pts {
				if c.wantEngine != "" && (p.Tags["engine"] != c.wantEngine || c.wantModel != "" && p.Tags["model"] != c.wantModel) {
					t.Fatalf("window %v tagged engine %q model %q, want %q and %q", p.Time, p.Tags["engine"], p.Tags["model"],
						c.wantEngine, c.wantModel)
				}
			}
			if c.maxTotal > 0 && rep.TotalErr() > c.maxTotal {
				t.Errorf("total %.0f against %.0f arrived: %.2f%% off, want at most %.2f%%", rep.Tokens, rep.Truth,
					100*rep.TotalErr(), 100*c.maxTotal)
			}
		})
	}
}

// without writes a copy of the file at path without the lines holding
// drop, and returns its path.
func without(t *testing.T, path, drop string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var kept []byte
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if !bytes.Contains(l, []byte(drop)) {
			kept = append(kept, l...)
		}
	}
	out := path + ".without"
	if err := os.WriteFile(out, kept, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
