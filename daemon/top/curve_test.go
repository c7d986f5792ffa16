package top

import (
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/analysis/curve"
)

// TestCurveLine: a server seen at 1, 4 and 16 running (per-user 100, 50,
// 10) has its operating point at 4 under a floor of 20, and at 16 (knee
// not observed) under 5.
func TestCurveLine(t *testing.T) {
	var r serverRow
	r.name = "llm"
	for _, lv := range []struct{ running, user float64 }{{1, 100}, {1, 100}, {1, 100}, {4, 50}, {4, 50}, {4, 50}, {16, 10}, {16, 10}, {16, 10}} {
		r.windows = append(r.windows, curve.Window{Seconds: 10, Running: curve.Some(lv.running),
			SystemTPS: curve.Some(lv.running * lv.user), PerUserTPS: curve.Some(lv.user)})
	}
	// Median system TPS of the nine: 160 (16 x 10); at 4 running 200.
	if got, want := r.curveLine(20), "headroom 1.2× at 4 running, per-user floor 20 tok/s (last 9 windows)"; got != want {
		t.Errorf("floor 20: %q, want %q", got, want)
	}
	if got := r.curveLine(5); !strings.Contains(got, "headroom 1.0× at 13-16 running, per-user floor 5 tok/s; knee not observed above 13-16") {
		t.Errorf("floor 5: %q", got)
	}
	if got := r.curveLine(200); !strings.Contains(got, "not met at any concurrency seen in 3 windows or more") {
		t.Errorf("floor 200: %q", got)
	}
}
