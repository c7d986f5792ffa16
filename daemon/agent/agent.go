// Package agent is the tpsmon daemon: it starts the sources, runs the
// joiner on its own loop, hands closed windows to the outputs and InfluxDB,
// serves self-telemetry, and talks to systemd (design §2, §7). New builds
// one from a configuration; Run runs it until its context ends.
package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/live"
	"github.com/tpsmon/tpsmon/internal/httpserve"
	"github.com/tpsmon/tpsmon/internal/redact"
	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/internal/wake"
	"github.com/tpsmon/tpsmon/nvml"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
)

// stopTimeout bounds the final delivery at shutdown.
const stopTimeout = 10 * time.Second

// OpenBackend returns the opener of the configured GPU backend; nil for
// none. sim GPUs idle unless a load is given.
func OpenBackend(cfg *config.Config, load func(time.Time) float64) func() (GPUSampler, error) {
	switch cfg.GPU.Backend {
	case "nvml":
		return func() (GPUSampler, error) {
			s, err := nvml.OpenSystem(cfg.GPU.Devices)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	case "sim":
		if load == nil {
			load = func(time.Time) float64 { return 0 }
		}
		return func() (GPUSampler, error) { return gpusim.New(cfg.GPU.SimGPUs, load), nil }
	}
	return nil
}

// Options are the agent's optional parts; the zero value runs what the
// configuration says. They are what the commands need (run, run --once,
// demo); the knobs only tests turn are hooks.
type Options struct {
	// Log receives the daemon's log; nil discards it.
	Log *slog.Logger
	// Version names this build in the log and to InfluxDB.
	Version string
	// Reload delivers SIGHUP; Load re-reads the configuration then, and
	// SetLevel applies its log level.
	Reload   <-chan os.Signal
	Load     func() (*config.Config, error)
	SetLevel func(level string)
	// OpenGPU replaces the configured GPU backend (the demo's simulated
	// GPUs) until a reload names another backend.
	OpenGPU func() (GPUSampler, error)
	// Outputs replace the file sink: closed windows go there (and to
	// InfluxDB when one is configured).
	Outputs []WindowWriter
	// Listening is told where the HTTP endpoint listens.
	Listening func(addr net.Addr)
}

// hooks are the knobs only tests turn; their zero values are the
// daemon's. newAgent resolves them once, with Options' defaults: nothing
// after it checks for a zero.
type hooks struct {
	// client reads the servers' metrics; nil: one with a 5 s timeout.
	client *http.Client
	// logPoll is how often log files are read; 0: the tailer's default.
	logPoll time.Duration
	// logGrace replaces the grace of log sources (defaultLogGrace).
	logGrace time.Duration
	// attribEvery is how often servers with gpus: auto are placed on
	// their GPUs (defaultAttribEvery).
	attribEvery time.Duration
	// gpuRetry is how long a GPU backend that failed to open waits before
	// the next try (defaultGPURetry).
	gpuRetry time.Duration
	// stopSources is how long shutdown waits for the sources to end
	// (defaultStopSources).
	stopSources time.Duration
	// stallAfter is how long the main loop or the GPU sampler may make no
	// progress before the watchdog is starved; 0: three ticks of the
	// loop or the sampler, and at least defaultStall.
	stallAfter time.Duration
	// positionDir keeps the log positions the joiner took; empty: beside
	// the spool when InfluxDB is used, else a log is read from its end at
	// each start.
	positionDir string
	// notify tells the service manager the daemon's state (sd_notify
	// messages); nil: systemd's NOTIFY_SOCKET, nothing outside systemd.
	// The watchdog's timeout is read from WATCHDOG_USEC either way.
	notify func(state string) error
}

// Agent is one daemon. New fills every field; Run only reads them, apart
// from the outputs assemble gives the pipeline.
type Agent struct {
	cfg *config.Config
	o   Options
	// openGPU opens the GPU backend Run starts with: Options.OpenGPU or
	// the configured backend's; nil for none.
	openGPU func() (GPUSampler, error)
	notify  func(state string) error
	// stale is how long the main loop or the sampler may make no progress.
	stale time.Duration
	// http bounds the HTTP endpoint; its MaxConns comes from
	// http.max_connections at Run. Tests shorten the timeouts.
	http    httpserve.Limits
	metrics *metrics
	health  *health
	p       *pipeline
}

// New returns the daemon of cfg; nothing starts before Run.
func New(cfg *config.Config, o Options) *Agent { return newAgent(cfg, o, hooks{}) }

// newAgent is New with the tests' hooks: the one place where a default
// is put for a value not given.
func newAgent(cfg *config.Config, o Options, h hooks) *Agent {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, o: o, openGPU: o.OpenGPU, notify: h.notify, stale: h.stallAfter, http: httpserve.Defaults(),
		metrics: newMetrics(), health: &health{}}
	if a.openGPU == nil {
		a.openGPU = OpenBackend(cfg, nil)
	}
	if a.notify == nil {
		a.notify = sdNotify
	}
	if a.stale <= 0 {
		a.stale = max(defaultStall, 3*min(cfg.Window/10, time.Second), 3*cfg.GPU.Interval)
	}
	or := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	a.p = &pipeline{log: o.Log, now: time.Now, client: h.client, posDir: h.positionDir, metrics: a.metrics, health: a.health,
		reconf: make(chan reconfig), applied: make(chan struct{}),
		tune: tuning{logPoll: h.logPoll, logGrace: or(h.logGrace, defaultLogGrace), gpuRetry: or(h.gpuRetry, defaultGPURetry),
			attribEvery: or(h.attribEvery, defaultAttribEvery), stopSources: or(h.stopSources, defaultStopSources)}}
	if a.p.client == nil {
		a.p.client = collector.NewClient(5 * time.Second)
	}
	return a
}

// defaultStall is the shortest time without progress that starves the
// watchdog: a loaded machine must not restart a healthy daemon.
const defaultStall = 3 * time.Second

// Run runs the daemon until ctx ends, then closes the open windows as
// partial and delivers what it can within stopTimeout. An Agent runs once.
func (a *Agent) Run(ctx context.Context) error {
	cfg, log, o, p := a.cfg, a.o.Log, a.o, a.p
	tel := &telemetry{health: a.health, metrics: a.metrics, stale: a.stale, pprof: cfg.HTTP.Pprof}
	outs, closeAll, err := a.assemble(p, tel)
	defer closeAll()
	if err != nil {
		return err
	}
	if len(cfg.Servers) == 0 && cfg.Discovery.Enabled {
		cfg.Servers = Discover(ctx, p.client, cfg.Discovery.Ports, log)
	}
	if len(cfg.Servers) == 0 {
		log.Warn("no inference server configured or discovered; sampling GPUs only")
	}

	ready := make(chan struct{})
	p.ready = func() { close(ready) }
	p.stopping = func() { a.tell(daemon.SdNotifyStopping) }
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	done := make(chan error, 1)
	go func() { done <- p.run(loopCtx, cfg, a.openGPU) }()
	select {
	case <-ready:
	case err := <-done:
		return err
	}
	log.Info("tpsmon running", "version", o.Version, "host", cfg.Host, "window", cfg.Window,
		"servers", len(cfg.Servers), "gpu_backend", cfg.GPU.Backend, "influx", redact.URL(cfg.Sink.Influx.URL),
		"otlp", redact.URL(cfg.Sink.OTLP.Endpoint))
	return a.supervise(tel, outs, done)
}

// spooled are the outputs that deliver through a spool, nil where not
// configured: InfluxDB (sink.influx.url) and OTLP (sink.otlp.endpoint).
type spooled struct {
	influx, otlp *sink.SpoolWriter
}

// assemble gives the pipeline its outputs (InfluxDB and OTLP, each
// through its spool, the given outputs or the file sink, the API's view)
// and starts the HTTP endpoint: the one place a daemon is put together.
// closeAll undoes what was started, in reverse, also after an error.
func (a *Agent) assemble(p *pipeline, tel *telemetry) (outs spooled, closeAll func(), err error) {
	cfg, log, o := a.cfg, a.o.Log, a.o
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if cfg.Sink.Influx.URL != "" || cfg.Sink.OTLP.Endpoint != "" {
		// One daemon per state directory: a second one would append to
		// and send the same spool (run --once has no InfluxDB, no state).
		lock, err := lockState(cfg.Sink.Spool.Dir)
		if err != nil {
			return outs, closeAll, err
		}
		closers = append(closers, func() { lock.Close() })
		// The senders stop side by side: each gives its store stopTimeout
		// to take what is spooled, and a store that is down must not
		// take the other's time.
		var stops []func()
		closers = append(closers, func() {
			var wg sync.WaitGroup
			for _, stop := range stops {
				wg.Go(stop)
			}
			wg.Wait()
		})
		if cfg.Sink.Influx.URL != "" {
			out, stop, err := startInflux(cfg, log, o.Version)
			if err != nil {
				return outs, closeAll, err
			}
			stops = append(stops, stop)
			outs.influx = out
			p.outputs = append(p.outputs, out)
			tel.spool, tel.sender = out.Spool, out.Sender
		}
		if cfg.Sink.OTLP.Endpoint != "" {
			out, stop, err := startOTLP(cfg, log, o.Version)
			if err != nil {
				return outs, closeAll, err
			}
			stops = append(stops, stop)
			outs.otlp = out
			p.outputs = append(p.outputs, out)
			tel.otlpSpool, tel.otlpSender = out.Spool, out.Sender
		}
		p.stateDir = cfg.Sink.Spool.Dir
		// Log positions in the state directory with the spool: both must
		// survive a restart. Earlier versions kept them beside it.
		pos, err := statefile.Dir(cfg.Sink.Spool.Dir, "positions")
		if err != nil {
			return outs, closeAll, fmt.Errorf("log positions: %w", err)
		}
		movePositions(filepath.Join(filepath.Dir(cfg.Sink.Spool.Dir), "positions"), pos, log)
		if p.posDir == "" { // hooks.positionDir first
			p.posDir = pos
		}
	}
	switch {
	case o.Outputs != nil:
		p.outputs = append(p.outputs, o.Outputs...)
	case outs.influx == nil && outs.otlp == nil && cfg.Sink.File.Path == config.NoFileSink:
		log.Warn("no InfluxDB configured (sink.influx.url), no OTLP receiver (sink.otlp.endpoint) and sink.file.path is none: points are not written; " +
			"the open and recent windows are still on http.listen and in tpsmon top")
	case outs.influx == nil && cfg.Sink.File.Path != config.NoFileSink:
		f, err := sink.OpenFile(cfg.Sink.File.Path)
		if err != nil {
			return outs, closeAll, err
		}
		closers = append(closers, func() { f.Close() })
		lw := sink.NewLPWriter(f)
		lw.SetProfile(sink.Profile(cfg.Sink.Influx.Profile))
		p.outputs = append(p.outputs, lw)
	}
	if cfg.HTTP.Listen != "" {
		view := live.New(cfg.Host, cfg.Window, nil)
		p.live, tel.windows = view, view
		p.outputs = append(p.outputs, view)
		if cfg.HTTP.WindowMetrics {
			tel.windowMetrics = newWindowMetrics()
			p.outputs = append(p.outputs, tel.windowMetrics)
		}
		addr, stopHTTP, err := tel.serve(cfg.HTTP.Listen, a.httpLimits(), log)
		if err != nil {
			return outs, closeAll, err
		}
		closers = append(closers, stopHTTP)
		log.Info("self-telemetry", "url", "http://"+addr.String()+"/metrics")
		if o.Listening != nil {
			o.Listening(addr)
		}
	}
	return outs, closeAll, nil
}

// supervise tells systemd the daemon's status, applies reloads and feeds
// the watchdog (at half its timeout, and only while the main loop and the
// sampler make progress) until the main loop ends.
func (a *Agent) supervise(tel *telemetry, outs spooled, done <-chan error) error {
	log, h := a.o.Log, a.health
	// running is the configuration the loop was last handed: the reloader
	// compares the file with it, never with the loop's own.
	running := a.cfg
	status := statusLine(tel)
	a.tell(daemon.SdNotifyReady + "\nSTATUS=" + status)
	wd, _ := daemon.SdWatchdogEnabled(false)
	beat := 5 * time.Second // status changes are not urgent; wakeups cost
	if wd > 0 {
		beat = min(time.Second, wd/2)
	}
	stale := tel.stale
	ticker := wake.NewTicker(beat)
	defer ticker.Stop()
	lastPing, stuck := time.Time{}, false
	for {
		select {
		case err := <-done:
			return err
		case <-a.o.Reload:
			nc, err := a.reload(running, outs)
			if err != nil {
				log.Error("reload rejected; the running configuration stays", "err", err)
				a.metrics.reloadFailures.Inc()
			} else {
				running = nc
			}
			h.reloadFailed(err)
			// What the beat compares with: the GPU backend reopens after
			// this, and the status must follow it.
			status = statusLine(tel)
			a.tell(daemon.SdNotifyReady + "\nSTATUS=" + status)
		case now := <-ticker.C:
			ticker.Next()
			if s := statusLine(tel); s != status {
				status = s
				a.tell("STATUS=" + s)
			}
			if wd == 0 || now.Sub(lastPing) < wd/2-beat/2 {
				continue
			}
			if h.healthy(now, stale) {
				a.tell(daemon.SdNotifyWatchdog)
				lastPing, stuck = now, false
			} else if !stuck {
				// What is stuck, and where our goroutines stand: the short
				// trace a watchdog restart leaves (the unit stops with
				// SIGTERM, not SIGABRT's full dump of every goroutine).
				log.Error("main loop or GPU sampler stuck; withholding the watchdog keep-alive", "stale_after", stale,
					"loop_age", now.Sub(time.Unix(0, h.loopAt.Load())).Round(time.Second),
					"gpu_age", now.Sub(time.Unix(0, h.gpuAt.Load())).Round(time.Second), "stacks", ourStacks())
				stuck = true
			}
		}
	}
}

// statusLine adds the delivery state to the daemon's status.
func statusLine(tel *telemetry) string {
	s := tel.health.status()
	if tel.sender != nil {
		h := tel.sender.Health()
		switch {
		case h.ConfigError != "":
			s += "; InfluxDB refuses the credentials or bucket"
		case h.LastError != "":
			s += fmt.Sprintf("; InfluxDB unreachable, %d points spooled", tel.spool.Stats().Points)
		}
	}
	if tel.otlpSender != nil {
		h := tel.otlpSender.Health()
		switch {
		case h.ConfigError != "":
			s += "; the OTLP receiver refuses the headers or the path"
		case h.LastError != "":
			s += fmt.Sprintf("; OTLP receiver unreachable, %d points spooled", tel.otlpSpool.Stats().Points)
		}
	}
	return s
}

// reload re-reads the configuration and applies it: servers, GPU
// settings, InfluxDB client and log level change at once; keys that shape
// the stored series or what the process holds open (window, grace, host,
// spool, http.listen, whether InfluxDB is used at all) need a restart.
// All or nothing: a file that does not load, or that drops keys the
// running file sets (config.CheckReload), changes nothing. old is the
// configuration in force; the one returned is in force once reload
// returns, handed to the main loop with the GPU opener it is to use.
func (a *Agent) reload(old *config.Config, outs spooled) (*config.Config, error) {
	log, o, p := a.o.Log, a.o, a.p
	a.tell(daemon.SdNotifyReloading + "\n" + daemon.SdNotifyMonotonicUsec())
	if o.Load == nil {
		return nil, errors.New("no configuration to reload")
	}
	nc, err := o.Load()
	if err != nil {
		return nil, err
	}
	if err := config.CheckReload(old, nc); err != nil {
		return nil, err
	}
	var kept []string
	keep := func(name string, differs bool) {
		if differs {
			kept = append(kept, name)
		}
	}
	keep("window", nc.Window != old.Window)
	keep("grace", nc.Grace != old.Grace)
	keep("host", nc.Host != old.Host)
	keep("sink.spool", nc.Sink.Spool != old.Sink.Spool)
	keep("http.listen", nc.HTTP.Listen != old.HTTP.Listen)
	keep("http.max_connections", nc.HTTP.MaxConnections != old.HTTP.MaxConnections)
	keep("sink.influx.url (on/off)", (nc.Sink.Influx.URL == "") != (old.Sink.Influx.URL == ""))
	keep("sink.otlp.endpoint (on/off)", (nc.Sink.OTLP.Endpoint == "") != (old.Sink.OTLP.Endpoint == ""))
	keep("sink.file", nc.Sink.File != old.Sink.File)
	keep("http.window_metrics", nc.HTTP.WindowMetrics != old.HTTP.WindowMetrics)
	// The encoders are made with their profile at start.
	keep("sink.influx.profile", nc.Sink.Influx.Profile != old.Sink.Influx.Profile)
	nc.Sink.Influx.Profile = old.Sink.Influx.Profile
	nc.Window, nc.Grace, nc.Host, nc.Sink.Spool, nc.HTTP, nc.Sink.File = old.Window, old.Grace, old.Host, old.Sink.Spool, old.HTTP, old.Sink.File
	if (nc.Sink.Influx.URL == "") != (old.Sink.Influx.URL == "") {
		nc.Sink.Influx = old.Sink.Influx
	}
	if (nc.Sink.OTLP.Endpoint == "") != (old.Sink.OTLP.Endpoint == "") {
		nc.Sink.OTLP = old.Sink.OTLP
	}
	if len(kept) > 0 {
		log.Warn("reload: these keys change only at restart", "keys", strings.Join(kept, ", "))
	}
	// Both writers are made before either is swapped: all or nothing.
	var in *sink.Influx
	if outs.influx != nil && nc.Sink.Influx != old.Sink.Influx {
		if in, err = nc.InfluxClient(userAgent(o.Version)); err != nil {
			return nil, err
		}
	}
	if outs.otlp != nil && !nc.Sink.OTLP.Equal(old.Sink.OTLP) {
		ow, err := nc.OTLPClient(userAgent(o.Version))
		if err != nil {
			if in != nil {
				in.Close()
			}
			return nil, fmt.Errorf("sink.otlp: %w", err)
		}
		outs.otlp.Sender.SetWriter(ow)
	}
	if in != nil {
		outs.influx.Sender.SetWriter(in)
	}
	if len(nc.Servers) == 0 && nc.Discovery.Enabled {
		nc.Servers = old.Servers
	}
	// The main loop hands the opener to the sampler it starts: the one
	// still retrying the old backend reads its own. A backend of
	// Options.OpenGPU stays until the file names another.
	rc := reconfig{cfg: nc}
	if o.OpenGPU == nil || nc.GPU.Backend != old.GPU.Backend {
		rc.openGPU, rc.newGPU = OpenBackend(nc, nil), true
	}
	if o.SetLevel != nil {
		o.SetLevel(nc.Log.Level)
	}
	p.reconf <- rc
	<-p.applied
	log.Info("configuration reloaded", "servers", len(nc.Servers))
	return nc, nil
}

// tell tells systemd (or hooks.notify) about the daemon's state; outside
// systemd (no NOTIFY_SOCKET) it does nothing.
func (a *Agent) tell(state string) {
	if err := a.notify(state); err != nil {
		a.o.Log.Warn("systemd notification failed", "err", err)
	}
}

func sdNotify(state string) error {
	_, err := daemon.SdNotify(false, state)
	return err
}

// httpLimits are the HTTP endpoint's bounds: http.max_connections, lowered
// to a share of the open-file limit so that clients of the endpoint can
// never take the descriptors scrapes need.
func (a *Agent) httpLimits() httpserve.Limits {
	lim := a.http
	if n := a.cfg.HTTP.MaxConnections; n > 0 {
		lim.MaxConns = n
	}
	if n, nofile := httpserve.CapToFiles(lim.MaxConns); n < lim.MaxConns {
		a.o.Log.Warn("http.max_connections lowered to a quarter of the open-file limit", "configured", lim.MaxConns,
			"max_connections", n, "nofile", nofile)
		lim.MaxConns = n
	}
	return lim
}

// startInflux opens the spool and starts the sender that drains it into
// InfluxDB. stop ends the sender (a write in flight finishes first), then
// delivers what is spooled, within stopTimeout in all; the rest stays for
// the next start.
func startInflux(cfg *config.Config, log *slog.Logger, version string) (out *sink.SpoolWriter, stop func(), err error) {
	in, err := cfg.InfluxClient(userAgent(version))
	if err != nil {
		return nil, nil, err
	}
	sp, err := spool.Open(spool.Options{Dir: cfg.Sink.Spool.Dir, MaxBytes: int64(cfg.Sink.Spool.MaxBytes),
		QuarantineMaxBytes: int64(cfg.Sink.Spool.QuarantineMaxBytes), Log: log})
	if err != nil {
		in.Close()
		return nil, nil, fmt.Errorf("sink.spool.dir: %w", err)
	}
	// A refusal episode is over once no point was refused for a while:
	// longer than a few windows, so that one window's point per server
	// does not end and restart it.
	// A write in flight at the stop is let finish (within the stop's
	// time), not cut off and sent again: a store that keeps every sample
	// would hold it twice.
	sender := &sink.Sender{Spool: sp, W: in, Log: log, StaleAfter: max(30*time.Minute, 3*cfg.Window), Drain: stopTimeout / 2}
	stop = runSender(sender, log, "influx", in.Close)
	sw := sink.NewSpoolWriter(sp, sender)
	sw.SetProfile(sink.Profile(cfg.Sink.Influx.Profile))
	return sw, stop, nil
}

// startOTLP opens the OTLP spool (<sink.spool.dir>/otlp, bounded as the
// InfluxDB one) and starts its sender: an outage of either store never
// holds up the other. stop is as startInflux's.
func startOTLP(cfg *config.Config, log *slog.Logger, version string) (out *sink.SpoolWriter, stop func(), err error) {
	w, err := cfg.OTLPClient(userAgent(version))
	if err != nil {
		return nil, nil, fmt.Errorf("sink.otlp: %w", err)
	}
	dir := filepath.Join(cfg.Sink.Spool.Dir, otlpSpoolDir)
	sp, err := spool.Open(spool.Options{Dir: dir, MaxBytes: int64(cfg.Sink.Spool.MaxBytes),
		QuarantineMaxBytes: int64(cfg.Sink.Spool.QuarantineMaxBytes), Log: log.With("spool", otlpSpoolDir)})
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("sink.spool.dir: %w", err)
	}
	// A batch in flight at the stop finishes (Drain), as InfluxDB's does:
	// cut off after the receiver took it, it would be sent again, and a
	// store that keeps every sample would hold it twice.
	sender := &sink.Sender{Spool: sp, W: w, Name: "OTLP receiver", Log: log.With("sink", "otlp"),
		StaleAfter: max(30*time.Minute, 3*cfg.Window), Drain: stopTimeout / 2}
	stop = runSender(sender, log, "otlp", w.Close)
	// The numeric profile whatever sink.influx.profile says: OTLP
	// carries numbers only.
	sw := sink.NewSpoolWriter(sp, sender)
	sw.SetProfile(sink.ProfileNumeric)
	return sw, stop, nil
}

// runSender starts s draining its spool and returns its stop: the sender
// stops, the rest of the stop's time flushes what the spool holds (what
// does not go stays for the next start), then the spool and the store's
// client close.
func runSender(s *sink.Sender, log *slog.Logger, store string, closeClient func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	return func() {
		deadline := time.Now().Add(stopTimeout)
		cancel()
		<-done
		fctx, fcancel := context.WithDeadline(context.Background(), deadline)
		defer fcancel()
		if err := s.Flush(fctx); err != nil {
			log.Warn("points left in the spool for the next start", "sink", store, "points", s.Spool.Stats().Points, "err", err)
		}
		log.Info(store+" sender stopped", "points_sent", s.Health().Sent, "points_dropped", s.Spool.Stats().Dropped)
		s.Spool.Close()
		closeClient()
	}
}

// otlpSpoolDir is the OTLP spool, in the state directory.
const otlpSpoolDir = "otlp"

// userAgent names this tpsmon to InfluxDB.
func userAgent(version string) string { return "tpsmon/" + version }

// Discover probes the configured local ports for engines tpsmon reads.
func Discover(ctx context.Context, client *http.Client, ports []int, log *slog.Logger) []config.ServerConfig {
	var found []config.ServerConfig
	for _, port := range ports {
		u := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
		sc := &collector.Scraper{Server: "probe", URL: u, Interval: time.Second, Client: client}
		if r := sc.Scrape(ctx); r.Err == nil {
			engine := r.Sample.Engine
			name := fmt.Sprintf("%s-%d", engine, port)
			log.Info("discovered server", "server", name, "url", u, "engine", engine, "model", r.Sample.Model)
			found = append(found, config.ServerConfig{Name: name, Engine: engine, MetricsURL: u,
				GPUs: []string{"auto"}, ScrapeInterval: time.Second})
		}
	}
	return found
}

// lockState checks the state directory and takes it for this process
// for as long as the returned file is open.
func lockState(dir string) (*os.File, error) {
	if err := statefile.EnsureDir(dir); err != nil {
		return nil, fmt.Errorf("sink.spool.dir: %w", err)
	}
	f, err := statefile.Lock(dir)
	if err != nil {
		return nil, fmt.Errorf("sink.spool.dir: %w", err)
	}
	return f, nil
}

// movePositions moves the log positions an earlier version kept beside
// the state directory into it, once; a failure only means logs are read
// from their end once. Only from a directory of tpsmon's own: positions
// planted by another user would choose where logs are read from.
func movePositions(old, cur string, log *slog.Logger) {
	names, err := filepath.Glob(filepath.Join(old, "*.json"))
	if err != nil || len(names) == 0 {
		return
	}
	if err := statefile.Owned(old); err != nil {
		log.Warn("log positions of an earlier version left where they are", "err", err)
		return
	}
	for _, n := range names {
		dst, err := statefile.Join(cur, filepath.Base(n))
		if err != nil {
			continue
		}
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		if b, err := statefile.Read(n); err == nil && statefile.WriteAtomic(dst, b) == nil {
			os.Remove(n)
		}
	}
	os.Remove(old) // only when empty
	log.Info("log positions moved into the state directory", "from", old, "to", cur)
}

// ourStacks is the goroutine profile cut to tpsmon's own frames, identical
// stacks counted once: a few lines that say where each part waits.
func ourStacks() string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return err.Error()
	}
	var out []string
	for _, block := range strings.Split(buf.String(), "\n\n") {
		lines := strings.Split(block, "\n")
		count, _, _ := strings.Cut(lines[0], " @")
		var frames []string
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) >= 4 && strings.Contains(f[2], "tpsmon/tpsmon/") {
				name := f[2][strings.LastIndex(f[2], "/")+1:]
				frames = append(frames, name+" "+filepath.Base(f[3]))
			}
		}
		if len(frames) > 0 {
			out = append(out, count+": "+strings.Join(frames, " < "))
		}
	}
	return strings.Join(out, "; ")
}
