package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/nvml"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
)

func newRunCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFromFlags(cmd)
			if err != nil {
				return err
			}
			return runDaemon(cmd.Context(), cfg, newLogger(cfg.Log.Level), nil)
		},
	}
	addConfigFlags(cmd)
	return cmd
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(strings.ToUpper(level)))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
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
		return func() (gpuSampler, error) { return nvml.NewSim(2, load), nil }
	}
	return nil
}

// runDaemon runs the pipeline of cfg until ctx ends. openGPU replaces the
// configured backend when not nil (tests).
func runDaemon(ctx context.Context, cfg *Config, log *slog.Logger, openGPU func() (gpuSampler, error)) error {
	if openGPU == nil {
		openGPU = openBackend(cfg, nil)
	}
	p := &pipeline{cfg: cfg, log: log, openGPU: openGPU}
	tel := &telemetry{p: p}
	if cfg.Sink.Influx.URL != "" {
		out, stop, err := startInflux(cfg, log)
		if err != nil {
			return err
		}
		defer stop()
		p.outputs = append(p.outputs, out)
		p.stateDir = cfg.Sink.Spool.Dir
		tel.spool, tel.sender = out.spool, out.sender
	} else {
		f, err := sink.OpenFile(cfg.Sink.File.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		p.outputs = append(p.outputs, newLPOutput(f))
	}
	if cfg.HTTP.Listen != "" {
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
	p.ready = func() {
		status := fmt.Sprintf("STATUS=monitoring %d servers, GPU backend %s", len(cfg.Servers), cfg.GPU.Backend)
		notify(log, daemon.SdNotifyReady+"\n"+status)
	}
	p.stopping = func() { notify(log, daemon.SdNotifyStopping) }
	log.Info("tpsmon running", "version", version, "host", cfg.Host, "window", cfg.Window,
		"servers", len(cfg.Servers), "gpu_backend", cfg.GPU.Backend, "influx", cfg.Sink.Influx.URL)
	return p.run(ctx)
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
		sc := &collector.Scraper{Server: "probe", URL: u, Interval: time.Second, Dialect: &collector.VLLM, Client: client}
		if r := sc.Scrape(ctx); r.Err == nil {
			name := fmt.Sprintf("vllm-%d", port)
			log.Info("discovered server", "server", name, "url", u, "model", r.Sample.Model)
			found = append(found, ServerConfig{Name: name, Engine: "vllm", MetricsURL: u,
				GPUs: []string{"auto"}, ScrapeInterval: time.Second})
		}
	}
	return found
}
