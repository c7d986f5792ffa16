package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/window"
)

// metrics are the daemon's own counters on /metrics, each updated where
// its event happens.
type metrics struct {
	late, lateTokens, malformed, failed, logUnseen prometheus.Counter
	beforeTokens                                   prometheus.Counter
	reloadFailures                                 prometheus.Counter
	// logSkipped is by server and logline.SkipReason: both sets bounded
	// (configured servers, a fixed list of reasons).
	logSkipped            *prometheus.CounterVec
	discards, gpuDiscards collector.DiscardCounts
	// suspects counts and logs the sanity rules' findings.
	suspects *suspects
	// The joiner counts late samples and tokens itself; these are what
	// the counters have taken of them so far.
	lateSeen, lateTokensSeen, beforeTokensSeen uint64
}

func newMetrics() *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &metrics{
		late:      c("tpsmon_late_samples_total", "Samples that arrived after their window closed; dropped."),
		malformed: c("tpsmon_scrapes_malformed_total", "Scrapes skipped because the metrics text did not parse."),
		failed:    c("tpsmon_scrapes_failed_total", "Scrapes that did not reach the server."),
		logSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tpsmon_log_lines_skipped_total",
			Help: "Log lines that looked like throughput lines but were not read, by server and reason " +
				"(unparsed: a layout tpsmon does not know; bad_number; too_long: cut before its figures; " +
				"padded: its only token count includes CUDA-graph padding)."}, []string{"server", "reason"}),
		logUnseen: c("tpsmon_log_requests_unseen_total", "Requests the server cancelled, which print no timing line: "+
			"their tokens are missing from servers read from their log alone."),
		lateTokens: c("tpsmon_late_tokens_total",
			"Output tokens that fell in windows already closed (requests reported at their end)."),
		beforeTokens: c("tpsmon_tokens_before_start_total",
			"Output tokens that log lines read after the start put before the daemon's first window (a line speaks of "+
				"the time before it); no window holds them."),
		suspects: newSuspects(),
		reloadFailures: c("tpsmon_reload_failures_total",
			"Reloads (SIGHUP) rejected: the file did not load, or dropped keys the running file sets; the running configuration stayed."),
	}
}

func (m *metrics) register(reg *prometheus.Registry) {
	reg.MustRegister(m.late, m.malformed, m.failed, m.logSkipped, m.logUnseen, m.lateTokens, m.beforeTokens, m.reloadFailures, discardCollector{&m.discards, discardDesc},
		discardCollector{&m.gpuDiscards, gpuDiscardDesc}, m.suspects.windows)
}

// joined takes what the joiner counted since the last call.
func (m *metrics) joined(j *window.Joiner) {
	if n := j.Late(); n > m.lateSeen {
		m.late.Add(float64(n - m.lateSeen))
		m.lateSeen = n
	}
	if n := uint64(j.LateTokens()); n > m.lateTokensSeen {
		m.lateTokens.Add(float64(n - m.lateTokensSeen))
		m.lateTokensSeen = n
	}
	if n := uint64(j.BeforeTokens()); n > m.beforeTokensSeen {
		m.beforeTokens.Add(float64(n - m.beforeTokensSeen))
		m.beforeTokensSeen = n
	}
}

// counted reads a counter back, for /healthz and the log.
func counted(c prometheus.Counter) uint64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		return 0
	}
	return uint64(d.GetCounter().GetValue())
}
