package agent

import (
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpsmon/tpsmon/analysis"
)

// suspects counts the windows each sanity rule doubted, per server, on
// /metrics, and logs each episode once: when a rule starts firing for a
// server, and when it stops, with how many windows it lasted. Only the
// pipeline's loop calls note.
type suspects struct {
	windows *prometheus.CounterVec
	// open holds, per server and rule, the windows of the episode under
	// way; a server's entry goes when no rule of it fires.
	open map[string]map[string]int
}

func newSuspects() *suspects {
	return &suspects{windows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tpsmon_suspect_windows_total",
		Help: "Server windows a sanity rule doubted, by server and rule (analysis.Rules; the window's suspect field); " +
			"their values were written as read."}, []string{"server", "rule"}),
		open: map[string]map[string]int{}}
}

// note takes the analysed windows' suspect fields.
func (s *suspects) note(cs []analysis.Closed, log *slog.Logger) {
	for _, c := range cs {
		for _, w := range c.Servers {
			s.server(w, log)
		}
	}
}

func (s *suspects) server(w analysis.ServerWindow, log *slog.Logger) {
	open := s.open[w.Server]
	if !w.Suspect.OK && len(open) == 0 {
		return
	}
	fired := map[string]bool{}
	if w.Suspect.OK {
		for _, r := range strings.Split(w.Suspect.V, ",") {
			fired[r] = true
			s.windows.WithLabelValues(w.Server, r).Inc()
			if open == nil {
				open = map[string]int{}
				s.open[w.Server] = open
			}
			if open[r] == 0 {
				attrs := []any{"server", w.Server, "rule", r, "window", w.Start}
				if r == analysis.RuleActivityZero && len(w.StuckGPUs) > 0 {
					attrs = append(attrs, "gpus", strings.Join(w.StuckGPUs, ","))
				}
				log.Warn("window suspect: a sanity rule doubts the server's numbers; written as read, said once until it stops", attrs...)
			}
			open[r]++
		}
	}
	for r, n := range open {
		if !fired[r] {
			log.Info("sanity rule no longer fires", "server", w.Server, "rule", r, "windows", n)
			delete(open, r)
		}
	}
	if len(open) == 0 {
		delete(s.open, w.Server)
	}
}
