package accuracy

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/tokentruth"
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
		// cancelled: the recording has requests the source cannot see.
		wantWarn string
	}{
		{name: "llamacpp metrics", arrivals: []string{"llamacpp-run1/arrivals.txt.gz", "llamacpp-run1/arrivals-cancelled.txt.gz"}, maxMean: 0.05, maxTotal: 0.005,
			args: func(t *testing.T) []string {
				return []string{"--metrics-dir", filepath.Join(llama, "metrics")}
			}},
		{name: "llamacpp docker-stamped log", arrivals: []string{"llamacpp-run1/arrivals.txt.gz"}, maxMean: 0.03,
			args: func(t *testing.T) []string {
				return []string{"--log", gunzip(t, "llamacpp-run1/server-stderr-ts.log.gz")}
			}},
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
			if c.maxTotal > 0 && rep.TotalErr() > c.maxTotal {
				t.Errorf("total %.0f against %.0f arrived: %.2f%% off, want at most %.2f%%", rep.Tokens, rep.Truth,
					100*rep.TotalErr(), 100*c.maxTotal)
			}
		})
	}
}
