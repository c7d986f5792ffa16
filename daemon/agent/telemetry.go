package agent

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/internal/httpserve"
	"github.com/tpsmon/tpsmon/internal/redact"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
)

// telemetry is tpsmon's own health: /metrics in the Prometheus format,
// and two JSON views. /healthz is liveness: the main loop and the GPU
// sampler make progress (what the systemd watchdog checks), so a probe
// that restarts on failure restarts only a stuck process. /readyz is
// readiness: InfluxDB takes the points, the spool keeps them, the servers
// are readable; an InfluxDB outage shows there and in no liveness probe.
type telemetry struct {
	health  *health
	metrics *metrics
	stale   time.Duration // no progress for this long is stuck
	spool   *spool.Spool  // nil without InfluxDB
	sender  *sink.Sender
	// otlpSpool and otlpSender deliver to the OTLP receiver; nil without
	// sink.otlp.endpoint.
	otlpSpool  *spool.Spool
	otlpSender *sink.Sender
	// windows serves the recent windows (api.WindowsPath); nil: not served.
	windows http.Handler
	// windowMetrics serves the last closed windows on /metrics
	// (http.window_metrics); nil: not served.
	windowMetrics *windowMetrics
	pprof         bool // serve /debug/pprof/ (http.pprof)
	// shed is what the endpoint turned away, once it serves (serve).
	shed atomic.Pointer[httpserve.Shed]
}

func (t *telemetry) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f))
	}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	t.metrics.register(reg)
	if t.windowMetrics != nil {
		reg.MustRegister(t.windowMetrics)
	}
	shed := func(f func(*httpserve.Shed) *atomic.Uint64) func() float64 {
		return func() float64 {
			if sh := t.shed.Load(); sh != nil {
				return float64(f(sh).Load())
			}
			return 0
		}
	}
	counter("tpsmon_http_accept_failures_total", "Accepts on http.listen that failed (out of file descriptors) and were retried.",
		shed(func(s *httpserve.Shed) *atomic.Uint64 { return &s.FailedAccepts }))
	counter("tpsmon_http_idle_closed_total", "Idle connections to http.listen closed at http.max_connections to let a new one in.",
		shed(func(s *httpserve.Shed) *atomic.Uint64 { return &s.ClosedIdle }))
	counter("tpsmon_http_refused_total", "New connections to http.listen closed at http.max_connections, every open one busy.",
		shed(func(s *httpserve.Shed) *atomic.Uint64 { return &s.Refused }))
	if t.otlpSpool != nil {
		ost := func() spool.Stats { return t.otlpSpool.Stats() }
		gauge("tpsmon_otlp_spool_points", "Points spooled and not yet accepted by the OTLP receiver.",
			func() float64 { return float64(ost().Points) })
		gauge("tpsmon_otlp_spool_bytes", "Bytes of points spooled and not yet accepted by the OTLP receiver.",
			func() float64 { return float64(ost().Bytes) })
		counter("tpsmon_otlp_spool_dropped_points_total", "OTLP points lost to a full spool or a failed spool write.",
			func() float64 { return float64(ost().Dropped) })
		counter("tpsmon_otlp_quarantined_points_total", "Points the OTLP receiver refused or found corrupt in its spool, kept in its quarantine directory.",
			func() float64 { return float64(ost().Quarantined) })
		counter("tpsmon_otlp_sent_points_total", "Points the OTLP receiver accepted.",
			func() float64 { return float64(t.otlpSender.Health().Sent) })
		counter("tpsmon_otlp_write_retries_total", "Exports to the OTLP receiver that failed and will be retried.",
			func() float64 { return float64(t.otlpSender.Health().Retries) })
		gauge("tpsmon_otlp_last_write_success_timestamp_seconds", "When the OTLP receiver last accepted an export (Unix time).",
			func() float64 {
				if ls := t.otlpSender.Health().LastSuccess; !ls.IsZero() {
					return float64(ls.UnixNano()) / 1e9
				}
				return 0
			})
	}
	if t.spool == nil {
		return reg
	}
	st := func() spool.Stats { return t.spool.Stats() }
	gauge("tpsmon_spool_bytes", "Bytes of points spooled and not yet accepted by InfluxDB.",
		func() float64 { return float64(st().Bytes) })
	gauge("tpsmon_spool_points", "Points spooled and not yet accepted by InfluxDB.",
		func() float64 { return float64(st().Points) })
	gauge("tpsmon_spool_oldest_unsent_age_seconds", "Age of the oldest point not yet accepted by InfluxDB.",
		func() float64 {
			if o := st().OldestUnsent; !o.IsZero() {
				return time.Since(o).Seconds()
			}
			return 0
		})
	counter("tpsmon_spool_dropped_points_total", "Points lost to a full spool or a failed spool write.",
		func() float64 { return float64(st().Dropped) })
	counter("tpsmon_quarantined_points_total", "Points InfluxDB rejected or found corrupt in the spool, kept in the quarantine directory.",
		func() float64 { return float64(st().Quarantined) })
	counter("tpsmon_spool_corrupt_bytes_total", "Corrupt spool bytes moved to quarantine at recovery.",
		func() float64 { return float64(st().QuarantinedBytes) })
	gauge("tpsmon_quarantine_bytes", "Bytes in the quarantine directory (bounded by sink.spool.quarantine_max_bytes).",
		func() float64 { return float64(st().QuarantineBytes) })
	counter("tpsmon_quarantine_dropped_points_total", "Quarantined points removed to keep the quarantine within its bound.",
		func() float64 { return float64(st().QuarantineDroppedPoints) })
	counter("tpsmon_quarantine_dropped_bytes_total", "Quarantine bytes removed to keep it within its bound.",
		func() float64 { return float64(st().QuarantineDroppedBytes) })
	counter("tpsmon_refused_points_total", "Points InfluxDB refused for their content (type conflict, parse, retention), moved to quarantine.",
		func() float64 { return float64(t.sender.Health().Refused) })
	gauge("tpsmon_refused_series", "Measurement and server pairs whose points InfluxDB refuses now.",
		func() float64 { return float64(len(t.sender.Health().Refusing)) })
	counter("tpsmon_sent_points_total", "Points InfluxDB accepted.",
		func() float64 { return float64(t.sender.Health().Sent) })
	counter("tpsmon_write_retries_total", "Writes to InfluxDB that failed and will be retried.",
		func() float64 { return float64(t.sender.Health().Retries) })
	gauge("tpsmon_last_write_success_timestamp_seconds", "When InfluxDB last accepted a write (Unix time).",
		func() float64 {
			if ls := t.sender.Health().LastSuccess; !ls.IsZero() {
				return float64(ls.UnixNano()) / 1e9
			}
			return 0
		})
	return reg
}

type healthReport struct {
	Status string        `json:"status"` // ok | degraded
	Issues []string      `json:"issues,omitempty"`
	Influx *influxHealth `json:"influx,omitempty"`
	Spool  *spool.Stats  `json:"spool,omitempty"`
	// OTLP is the OTLP push's delivery, its spool's in OTLPSpool.
	OTLP      *influxHealth `json:"otlp,omitempty"`
	OTLPSpool *spool.Stats  `json:"otlp_spool,omitempty"`
	Scrape    struct {
		Malformed uint64 `json:"malformed"`
		Failed    uint64 `json:"failed"`
	} `json:"scrapes"`
	LateSamples uint64 `json:"late_samples"`
}

type influxHealth struct {
	Sent        uint64     `json:"sent_points"`
	Retries     uint64     `json:"retries"`
	LastSuccess *time.Time `json:"last_success,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	Refused     uint64     `json:"refused_points"`
}

// liveReport is /healthz.
type liveReport struct {
	Status         string  `json:"status"` // alive | starting | stuck
	LoopAgeSeconds float64 `json:"loop_age_seconds,omitempty"`
	StaleAfter     float64 `json:"stale_after_seconds"`
}

func (t *telemetry) live(now time.Time) (liveReport, int) {
	r := liveReport{Status: "alive", StaleAfter: t.stale.Seconds()}
	at := t.health.loopAt.Load()
	if at == 0 {
		r.Status = "starting"
		return r, http.StatusOK
	}
	r.LoopAgeSeconds = now.Sub(time.Unix(0, at)).Seconds()
	if !t.health.healthy(now, t.stale) {
		r.Status = "stuck"
		return r, http.StatusServiceUnavailable
	}
	return r, http.StatusOK
}

// readiness is /readyz: what keeps tpsmon from delivering now.
func (t *telemetry) readiness() (healthReport, int) {
	r := healthReport{Status: "ok", LateSamples: counted(t.metrics.late)}
	r.Scrape.Malformed, r.Scrape.Failed = counted(t.metrics.malformed), counted(t.metrics.failed)
	if t.spool != nil {
		h := t.sender.Health()
		st := t.spool.Stats()
		r.Spool = &st
		h.LastError, h.ConfigError = redact.Text(h.LastError), redact.Text(h.ConfigError)
		r.Influx = &influxHealth{Sent: h.Sent, Retries: h.Retries, LastError: h.LastError, Refused: h.Refused}
		if !h.LastSuccess.IsZero() {
			r.Influx.LastSuccess = &h.LastSuccess
		}
		if h.ConfigError != "" {
			r.Issues = append(r.Issues, "InfluxDB refuses the credentials or the bucket: "+h.ConfigError)
		} else if h.LastError != "" {
			r.Issues = append(r.Issues, "InfluxDB writes failing, points kept in the spool: "+h.LastError)
		}
		for _, rf := range h.Refusing {
			r.Issues = append(r.Issues, refusalIssue("InfluxDB", rf))
		}
		// The present, not the past: a finished episode stays in the
		// counters (dropped_points), not in the status.
		if st.Dropping {
			r.Issues = append(r.Issues, fmt.Sprintf("the spool is dropping points now (full or unwritable; %d dropped so far)", st.Dropped))
		}
	}
	if t.otlpSpool != nil {
		h := t.otlpSender.Health()
		st := t.otlpSpool.Stats()
		r.OTLPSpool = &st
		h.LastError, h.ConfigError = redact.Text(h.LastError), redact.Text(h.ConfigError)
		r.OTLP = &influxHealth{Sent: h.Sent, Retries: h.Retries, LastError: h.LastError, Refused: h.Refused}
		if !h.LastSuccess.IsZero() {
			r.OTLP.LastSuccess = &h.LastSuccess
		}
		if h.ConfigError != "" {
			r.Issues = append(r.Issues, "the OTLP receiver refuses the headers or the path: "+h.ConfigError)
		} else if h.LastError != "" {
			r.Issues = append(r.Issues, "OTLP exports failing, points kept in the spool: "+h.LastError)
		}
		for _, rf := range h.Refusing {
			r.Issues = append(r.Issues, refusalIssue("the OTLP receiver", rf))
		}
		if st.Dropping {
			r.Issues = append(r.Issues, fmt.Sprintf("the OTLP spool is dropping points now (full or unwritable; %d dropped so far)", st.Dropped))
		}
	}
	if n := t.health.unreadable.Load(); n > 0 {
		r.Issues = append(r.Issues, fmt.Sprintf("%d of %d servers unreadable now", n, t.health.servers.Load()))
	}
	for _, e := range t.health.sourceErrors() {
		r.Issues = append(r.Issues, "log unreadable, server reads as down: "+e)
	}
	for _, e := range t.health.unattributed() {
		r.Issues = append(r.Issues, "GPUs not attributed (gpus: auto): "+e)
	}
	// The file on disk is not what runs until a reload is applied.
	if e := t.health.lastReloadError(); e != "" {
		r.Issues = append(r.Issues, "reload rejected, the running configuration stays: "+redact.Text(e))
	}
	if len(r.Issues) > 0 {
		r.Status = "degraded"
		return r, http.StatusServiceUnavailable
	}
	return r, http.StatusOK
}

// refusalIssue says on /readyz that store refuses a group's points.
func refusalIssue(store string, rf sink.Refusal) string {
	who := rf.Measurement + " points"
	if rf.Server != "" {
		who += " of server " + rf.Server
	}
	return fmt.Sprintf("%s refuses %s (moved to quarantine): %d points since %s, the last at %s: %s",
		store, who, rf.Points, rf.Since.UTC().Format(time.RFC3339), rf.Last.UTC().Format(time.RFC3339), redact.Text(rf.Reason))
}

func (t *telemetry) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(t.registry(), promhttp.HandlerOpts{}))
	if t.windows != nil {
		mux.Handle(api.WindowsPath, t.windows)
	}
	reply := func(w http.ResponseWriter, rep any, code int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	}
	if t.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		rep, code := t.live(time.Now())
		reply(w, rep, code)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		rep, code := t.readiness()
		reply(w, rep, code)
	})
	return mux
}

// serve listens on addr and serves within lim (httpserve) until stop,
// which returns once the listener and its connections are closed and the
// server's goroutine has ended.
func (t *telemetry) serve(addr string, lim httpserve.Limits, log *slog.Logger) (_ net.Addr, stop func(), _ error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("http.listen: %w", err)
	}
	if t.pprof {
		lim.Write = max(lim.Write, httpserve.ProfileWrite)
	}
	srv := httpserve.Serve(ln, t.handler(), lim, log)
	t.shed.Store(srv.Shed())
	return ln.Addr(), func() { srv.Close() }, nil
}

// discardCollector puts the values tpsmon refused on /metrics.
type discardCollector struct {
	c    *collector.DiscardCounts
	desc *prometheus.Desc
}

var (
	discardDesc = prometheus.NewDesc("tpsmon_samples_discarded_total",
		"Server values refused before they reached a window (NaN, Inf, negative, beyond the physical bound, jumps, flaps, counters of a suspect server).",
		[]string{"server", "reason"}, nil)
	gpuDiscardDesc = prometheus.NewDesc("tpsmon_gpu_samples_discarded_total",
		"GPU readings refused before they reached a window (NaN, Inf, negative, beyond the physical bound).",
		[]string{"gpu", "reason"}, nil)
)

func (d discardCollector) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

func (d discardCollector) Collect(ch chan<- prometheus.Metric) {
	d.c.Each(func(label string, r sample.Reason, n uint64) {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(n), label, r.String())
	})
}
