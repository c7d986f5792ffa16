package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/internal/live"
	"github.com/tpsmon/tpsmon/internal/redact"
	"github.com/tpsmon/tpsmon/internal/sim/gpusim"
	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/nvml"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
)

func newRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon",
		Long: `run is the daemon that the systemd unit starts. SIGHUP reloads the
configuration (an invalid one is rejected and the running one kept);
SIGTERM closes the open windows, delivers what it can within 10s and
leaves the rest in the spool.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFromFlags(cmd)
			if err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			log, level := newLogger(cfg.Log.Level)
			return runDaemon(cmd.Context(), cfg, log, daemonOpts{
				reload: hup,
				load:   func() (*Config, error) { return configFromFlags(cmd) },
				level:  level,
			})
		},
	}
	addConfigFlags(cmd)
	return cmd
}

// stopTimeout bounds the final delivery at shutdown.
const stopTimeout = 10 * time.Second

// openBackend returns the opener of the configured GPU backend; nil for
// none. sim GPUs idle unless a load is given.
func openBackend(cfg *Config, load func(time.Time) float64) func() (gpuSampler, error) {
	switch cfg.GPU.Backend {
	case "nvml":
		return func() (gpuSampler, error) {
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
		return func() (gpuSampler, error) { return gpusim.New(cfg.GPU.SimGPUs, load), nil }
	}
	return nil
}

// daemonOpts are runDaemon's optional parts.
type daemonOpts struct {
	// openGPU replaces the configured GPU backend (tests).
	openGPU func() (gpuSampler, error)
	// reload delivers SIGHUP; load re-reads the configuration then.
	reload <-chan os.Signal
	load   func() (*Config, error)
	level  *slog.LevelVar
}

// runDaemon runs the pipeline of cfg until ctx ends.
func runDaemon(ctx context.Context, cfg *Config, log *slog.Logger, o daemonOpts) error {
	if o.openGPU == nil {
		o.openGPU = openBackend(cfg, nil)
	}
	p := &pipeline{cfg: cfg, log: log, openGPU: o.openGPU, reconf: make(chan *Config), applied: make(chan struct{})}
	tel := &telemetry{p: p}
	var influx *influxOutput
	if cfg.Sink.Influx.URL != "" {
		out, stop, err := startInflux(cfg, log)
		if err != nil {
			return err
		}
		defer stop()
		influx = out
		p.outputs = append(p.outputs, out)
		p.stateDir = cfg.Sink.Spool.Dir
		tel.spool, tel.sender = out.spool, out.sender
		// Log positions in the state directory with the spool: both must
		// survive a restart. Earlier versions kept them beside it.
		pos, err := statefile.Dir(cfg.Sink.Spool.Dir, "positions")
		if err != nil {
			return fmt.Errorf("log positions: %w", err)
		}
		movePositions(filepath.Join(filepath.Dir(cfg.Sink.Spool.Dir), "positions"), pos, log)
		p.posDir = pos
	} else {
		f, err := sink.OpenFile(cfg.Sink.File.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		p.outputs = append(p.outputs, newLPOutput(f))
	}
	if cfg.HTTP.Listen != "" {
		view := live.New(cfg.Host, cfg.Window, nil)
		p.live, tel.windows = view, view
		p.outputs = append(p.outputs, view)
		telCtx, stopTel := context.WithCancel(context.Background())
		defer stopTel()
		addr, err := tel.serve(telCtx, cfg.HTTP.Listen, log)
		if err != nil {
			return err
		}
		log.Info("self-telemetry", "url", "http://"+addr.String()+"/metrics")
	}
	p.client = &http.Client{Timeout: 5 * time.Second}
	if len(cfg.Servers) == 0 && cfg.Discovery.Enabled {
		cfg.Servers = discover(ctx, p.client, cfg.Discovery.Ports, log)
	}
	if len(cfg.Servers) == 0 {
		log.Warn("no inference server configured or discovered; sampling GPUs only")
	}

	ready := make(chan struct{})
	p.ready = func() { close(ready) }
	p.stopping = func() { notify(log, daemon.SdNotifyStopping) }
	loopCtx, stopLoop := context.WithCancel(ctx)
	defer stopLoop()
	done := make(chan error, 1)
	go func() { done <- p.run(loopCtx) }()
	select {
	case <-ready:
	case err := <-done:
		return err
	}
	log.Info("tpsmon running", "version", version, "host", cfg.Host, "window", cfg.Window,
		"servers", len(cfg.Servers), "gpu_backend", cfg.GPU.Backend, "influx", redact.URL(cfg.Sink.Influx.URL))
	status := statusLine(p, tel)
	notify(log, daemon.SdNotifyReady+"\nSTATUS="+status)

	// The watchdog is fed at half its timeout, and only while the main
	// loop and the sampler make progress.
	wd, _ := daemon.SdWatchdogEnabled(false)
	beat := 5 * time.Second // status changes are not urgent; wakeups cost
	if wd > 0 {
		beat = min(time.Second, wd/2)
	}
	stale := max(3*time.Second, 3*min(cfg.Window/10, time.Second), 3*cfg.GPU.Interval)
	ticker := time.NewTicker(beat)
	defer ticker.Stop()
	lastPing, stuck := time.Time{}, false
	for {
		select {
		case err := <-done:
			return err
		case <-o.reload:
			if err := reload(p, influx, log, o); err != nil {
				log.Error("reload rejected; the running configuration stays", "err", err)
			}
			notify(log, daemon.SdNotifyReady+"\nSTATUS="+statusLine(p, tel))
		case now := <-ticker.C:
			if s := statusLine(p, tel); s != status {
				status = s
				notify(log, "STATUS="+s)
			}
			if wd == 0 || now.Sub(lastPing) < wd/2-beat/2 {
				continue
			}
			if p.healthy(now, stale) {
				notify(log, daemon.SdNotifyWatchdog)
				lastPing, stuck = now, false
			} else if !stuck {
				log.Error("main loop or GPU sampler stuck; withholding the watchdog keep-alive", "stale_after", stale)
				stuck = true
			}
		}
	}
}

// statusLine adds the delivery state to the pipeline's status.
func statusLine(p *pipeline, tel *telemetry) string {
	s := p.status()
	if tel.sender == nil {
		return s
	}
	h := tel.sender.Health()
	switch {
	case h.ConfigError != "":
		s += "; InfluxDB refuses the credentials or bucket"
	case h.LastError != "":
		s += fmt.Sprintf("; InfluxDB unreachable, %d points spooled", tel.spool.Stats().Points)
	}
	return s
}

// reload re-reads the configuration and applies it: servers, GPU
// settings, InfluxDB client and log level change at once; keys that shape
// the stored series or what the process holds open (window, grace, host,
// spool, http.listen, whether InfluxDB is used at all) need a restart.
func reload(p *pipeline, influx *influxOutput, log *slog.Logger, o daemonOpts) error {
	notify(log, daemon.SdNotifyReloading+"\n"+daemon.SdNotifyMonotonicUsec())
	if o.load == nil {
		return errors.New("no configuration to reload")
	}
	nc, err := o.load()
	if err != nil {
		return err
	}
	old := p.cfg
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
	keep("sink.influx.url (on/off)", (nc.Sink.Influx.URL == "") != (old.Sink.Influx.URL == ""))
	keep("sink.file", nc.Sink.File != old.Sink.File)
	nc.Window, nc.Grace, nc.Host, nc.Sink.Spool, nc.HTTP, nc.Sink.File = old.Window, old.Grace, old.Host, old.Sink.Spool, old.HTTP, old.Sink.File
	if (nc.Sink.Influx.URL == "") != (old.Sink.Influx.URL == "") {
		nc.Sink.Influx = old.Sink.Influx
	}
	if len(kept) > 0 {
		log.Warn("reload: these keys change only at restart", "keys", strings.Join(kept, ", "))
	}
	if influx != nil && nc.Sink.Influx != old.Sink.Influx {
		in, err := nc.influxClient()
		if err != nil {
			return err
		}
		influx.sender.SetWriter(in)
	}
	if len(nc.Servers) == 0 && nc.Discovery.Enabled {
		nc.Servers = old.Servers
	}
	if o.openGPU != nil && nc.GPU.Backend != old.GPU.Backend {
		p.openGPU = openBackend(nc, nil)
	}
	if o.level != nil {
		o.level.Set(parseLevel(nc.Log.Level))
	}
	p.reconf <- nc
	<-p.applied
	log.Info("configuration reloaded", "servers", len(nc.Servers))
	return nil
}

// notify tells systemd about the daemon's state; outside systemd
// (no NOTIFY_SOCKET) it does nothing.
func notify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("systemd notification failed", "err", err)
	}
}

// startInflux opens the spool and starts the sender that drains it into
// InfluxDB. stop ends the sender, then gives it stopTimeout to deliver
// what is spooled; the rest stays for the next start.
func startInflux(cfg *Config, log *slog.Logger) (out *influxOutput, stop func(), err error) {
	in, err := cfg.influxClient()
	if err != nil {
		return nil, nil, err
	}
	sp, err := spool.Open(spool.Options{Dir: cfg.Sink.Spool.Dir, MaxBytes: int64(cfg.Sink.Spool.MaxBytes), Log: log})
	if err != nil {
		in.Close()
		return nil, nil, fmt.Errorf("sink.spool.dir: %w", err)
	}
	sender := &sink.Sender{Spool: sp, W: in, Log: log}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sender.Run(ctx); close(done) }()
	stop = func() {
		cancel()
		<-done
		fctx, fcancel := context.WithTimeout(context.Background(), stopTimeout)
		defer fcancel()
		if err := sender.Flush(fctx); err != nil {
			st := sp.Stats()
			log.Warn("points left in the spool for the next start", "points", st.Points, "err", err)
		}
		h := sender.Health()
		log.Info("influx sender stopped", "points_sent", h.Sent, "points_dropped", sp.Stats().Dropped)
		sp.Close()
		in.Close()
	}
	return &influxOutput{enc: sink.NewEncoder(), spool: sp, sender: sender}, stop, nil
}

// discover probes the configured local ports for engines tpsmon reads.
func discover(ctx context.Context, client *http.Client, ports []int, log *slog.Logger) []ServerConfig {
	var found []ServerConfig
	for _, port := range ports {
		u := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
		sc := &collector.Scraper{Server: "probe", URL: u, Interval: time.Second, Client: client}
		if r := sc.Scrape(ctx); r.Err == nil {
			engine := r.Sample.Engine
			name := fmt.Sprintf("%s-%d", engine, port)
			log.Info("discovered server", "server", name, "url", u, "engine", engine, "model", r.Sample.Model)
			found = append(found, ServerConfig{Name: name, Engine: engine, MetricsURL: u,
				GPUs: []string{"auto"}, ScrapeInterval: time.Second})
		}
	}
	return found
}

// movePositions moves the log positions an earlier version kept beside
// the state directory into it, once; a failure only means logs are read
// from their end once.
func movePositions(old, cur string, log *slog.Logger) {
	names, err := filepath.Glob(filepath.Join(old, "*.json"))
	if err != nil || len(names) == 0 {
		return
	}
	for _, n := range names {
		dst := filepath.Join(cur, filepath.Base(n))
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
