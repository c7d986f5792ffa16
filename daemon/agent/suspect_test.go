package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/window"
)

// TestSuspectsCountedAndLoggedOncePerEpisode: every suspect window counts
// per server and rule; the log says a rule's episode once when it starts
// and once when it ends.
func TestSuspectsCountedAndLoggedOncePerEpisode(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	s := newSuspects()
	win := func(server, suspect string) analysis.Closed {
		w := analysis.ServerWindow{ServerWindow: window.ServerWindow{Server: server, Start: time.Unix(0, 0)}}
		if suspect != "" {
			w.Suspect = window.Some(suspect)
		}
		if strings.Contains(suspect, analysis.RuleActivityZero) {
			w.StuckGPUs = []string{"1", "3"}
		}
		return analysis.Closed{Servers: []analysis.ServerWindow{w}}
	}
	for _, sus := range []string{analysis.RuleGPUIdle, analysis.RuleGPUIdle + "," + analysis.RuleActivityZero,
		analysis.RuleGPUIdle, "", ""} {
		s.note([]analysis.Closed{win("a", sus), win("b", "")}, log)
	}
	if got := value(t, s, "a", analysis.RuleGPUIdle); got != 3 {
		t.Errorf("a/gpu_idle counted %v windows, want 3", got)
	}
	if got := value(t, s, "a", analysis.RuleActivityZero); got != 1 {
		t.Errorf("a/activity_zero counted %v windows, want 1", got)
	}
	out := logged.String()
	if n := strings.Count(out, "window suspect"); n != 2 {
		t.Errorf("%d episode starts logged, want 2 (one per rule):\n%s", n, out)
	}
	if n := strings.Count(out, "no longer fires"); n != 2 {
		t.Errorf("%d episode ends logged, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "rule=gpu_idle windows=3") || strings.Contains(out, "server=b") {
		t.Errorf("log lacks gpu_idle's 3-window episode, or names a server no rule doubted:\n%s", out)
	}
	named := false
	for _, l := range strings.Split(out, "\n") {
		named = named || strings.Contains(l, "window suspect") && strings.Contains(l, "rule=activity_zero") && strings.HasSuffix(l, " gpus=1,3")
	}
	if !named || strings.Count(out, "gpus=") != 1 {
		t.Errorf("log does not name the stuck GPUs on activity_zero's start (only):\n%s", out)
	}
	if len(s.open) != 0 {
		t.Errorf("episodes left open: %v", s.open)
	}
}

func value(t *testing.T, s *suspects, server, rule string) float64 {
	t.Helper()
	var m dto.Metric
	if err := s.windows.WithLabelValues(server, rule).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
