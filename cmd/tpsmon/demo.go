package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/daemon/agent"
	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/internal/httpserve"
	"github.com/tpsmon/tpsmon/internal/logging"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
)

func newDemoCmd() *cobra.Command {
	var (
		duration time.Duration
		format   string
		gpus     int
		period   time.Duration
		listen   string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline on simulated GPUs and a simulated vLLM server",
		Long: `demo runs tpsmon end to end on any machine: simulated GPUs and an embedded
simulated vLLM server on loopback, whose load ramps up, saturates (requests
queue), ramps down and idles. Each closed window is printed; with
--influx-url the points also go to InfluxDB.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out, err := newOutput(format, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			cfg, err := config.Load("", false, cmd.Flags())
			if err != nil {
				return err
			}
			// The demo's own defaults, shorter than the daemon's.
			f := cmd.Flags()
			cfg.Window, _ = f.GetDuration("window")
			cfg.Grace, _ = f.GetDuration("grace")
			cfg.Log.Level, _ = f.GetString("log-level")
			ctx := cmd.Context()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			return runDemo(ctx, cfg, out, demoOpts{gpus: gpus, period: period, listen: listen, note: cmd.ErrOrStderr()})
		},
	}
	f := cmd.Flags()
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until interrupted)")
	f.StringVar(&format, "format", "table", "table, lp (line protocol) or json")
	f.IntVar(&gpus, "gpus", 2, "simulated GPUs")
	f.DurationVar(&period, "period", 60*time.Second, "length of one simulated load cycle")
	f.StringVar(&listen, "listen", "", "serve /api/v1/windows (tpsmon top), /metrics and /healthz here, e.g. 127.0.0.1:9464")
	f.Duration("window", 5*time.Second, "window length")
	f.Duration("grace", time.Second, "how long a window waits for late samples")
	f.String("host", "", "host tag (default: the hostname)")
	addInfluxFlags(cmd)
	f.String("log-level", "warn", "debug, info, warn or error")
	return cmd
}

// demoOpts are the demo's own settings.
type demoOpts struct {
	gpus   int
	period time.Duration
	// listen is where the API is served; empty: nowhere. note is told
	// the address.
	listen string
	note   io.Writer
}

func runDemo(ctx context.Context, cfg *config.Config, out agent.WindowWriter, o demoOpts) error {
	gpus, period := o.gpus, o.period
	if gpus < 1 {
		return fmt.Errorf("--gpus %d: at least one GPU", gpus)
	}
	// Start the cycle a little into the ramp so the first windows move.
	load := vllmsim.Profile(time.Now().Add(-period/10), period)
	sim := &vllmsim.Server{Model: "simulated/llama-3.1-70b", SoloTPS: 90, MaxBatch: 48, Load: load}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo server: %w", err)
	}
	log, _ := logging.New(cfg.Log.Level)
	mux := http.NewServeMux()
	mux.Handle("/metrics", sim)
	srv := httpserve.Serve(ln, mux, httpserve.Defaults(), log)
	defer srv.Close()

	cfg.GPU.Backend = "sim"
	cfg.Discovery.Enabled = false
	cfg.Servers = []config.ServerConfig{{Name: "demo-vllm", Engine: engine.VLLM, MetricsURL: "http://" + ln.Addr().String() + "/metrics",
		GPUs: []string{"auto"}, ScrapeInterval: 500 * time.Millisecond,
		// The simulated server's model, as a Llama 3.1 70B in 4-bit AWQ
		// (0.53 bytes a weight with its scales) with an FP8 KV cache of
		// 400k tokens on H100 SXMs: its windows carry the decode ceiling
		// (mbu, ceiling_tps, ceiling_finding).
		Roofline: config.RooflineConfig{ParamsB: 70.55, BytesPerWeight: 0.53, EmbedParamsB: 1.05, Layers: 80, KVHeads: 8,
			HeadDim: 128, KVBytes: 1, KVTokens: 400000, GPU: "H100 SXM"}}}
	// The demo serves HTTP only when asked, and keeps no state.
	cfg.HTTP.Listen = o.listen
	if cfg.Sink.Influx.URL != "" {
		dir, err := os.MkdirTemp("", "tpsmon-demo-spool-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.Sink.Spool.Dir = filepath.Join(dir, "spool")
	}
	a := agent.New(cfg, agent.Options{
		Log:     log,
		Version: version,
		OpenGPU: func() (agent.GPUSampler, error) { return gpusim.New(gpus, load), nil },
		Outputs: []agent.WindowWriter{out},
		Listening: func(addr net.Addr) {
			fmt.Fprintf(o.note, "tpsmon demo: serving http://%s%s; watch it with: tpsmon top --addr %s\n", addr, api.WindowsPath, addr)
		},
	})
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
