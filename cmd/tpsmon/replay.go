package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/modelfacts"
	"github.com/tpsmon/tpsmon/daemon/replay"
)

type replayOpts struct {
	logFile    string
	year       int
	startedAt  time.Time
	metricsDir string
	gpuCSV     string
	format     string
	window     time.Duration
	server     string
	engine     string
	gpus       []string
	host       string
	tz         string
	slo        analysis.SLO
	modelFile  string
	roofline   config.RooflineConfig
}

func newReplayCmd() *cobra.Command {
	var o replayOpts
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Join recorded metrics scrapes and GPU readings offline",
		Long: `replay reads recorded inputs and prints the joined windows:
  --log FILE         an inference server's log (--engine, or detected)
  --metrics-dir DIR  one scrape per file, named <unix-milliseconds>.prom
  --gpu-csv FILE     the CSV of nvidia-smi --query-gpu=timestamp,index,uuid,name,
                     utilization.gpu,utilization.memory,memory.used,memory.total,
                     power.draw --format=csv -l 1
With --model-file and --gpu (or --peak-bw-gbps) the windows carry the decode
ceiling: mbu and ceiling_tps (see tpsmon roofline).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.slo.Validate(); err != nil {
				return fmt.Errorf("--slo-%w", err)
			}
			out, err := newOutput(o.format, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			opts := o.options()
			if o.modelFile != "" {
				r := o.roofline
				if err := r.Validate("replay"); err != nil {
					return err
				}
				srv, err := modelfacts.Server(config.ServerConfig{ModelFile: o.modelFile, Roofline: r})
				if err != nil {
					return fmt.Errorf("--model-file: %w", err)
				}
				opts.Facts.Servers = map[string]analysis.ServerFacts{o.server: {Roofline: srv}}
			}
			return replay.Run(cmd.Context(), opts, out, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.logFile, "log", "", "server log to replay")
	f.IntVar(&o.year, "year", 0, "year of log timestamps that have none (default: this year)")
	f.Func("started-at", "when the server started (RFC3339): llama.cpp's --log-timestamps count from it",
		func(v string) error {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return fmt.Errorf("want RFC3339, e.g. 2026-11-30T08:41:44.2Z: %w", err)
			}
			o.startedAt = t
			return nil
		})
	f.StringVar(&o.metricsDir, "metrics-dir", "", "directory of <unix-ms>.prom scrapes")
	f.StringVar(&o.gpuCSV, "gpu-csv", "", "nvidia-smi --query-gpu CSV")
	f.StringVar(&o.format, "format", "json", "json, lp or table")
	f.DurationVar(&o.window, "window", 10*time.Second, "window length")
	f.StringVar(&o.server, "server", "replay", "server name")
	f.StringVar(&o.engine, "engine", "auto", "engine of the recorded server")
	f.StringSliceVar(&o.gpus, "gpus", nil, "GPU indexes or UUIDs serving the server (default: all in the CSV)")
	f.StringVar(&o.host, "host", "replay", "host tag")
	f.StringVar(&o.tz, "tz", "UTC", "time zone of the CSV timestamps")
	f.DurationVar(&o.slo.TTFT, "slo-ttft", 0, "objective: time to first token (slo_attainment, goodput)")
	f.DurationVar(&o.slo.TPOT, "slo-tpot", 0, "objective: time per output token")
	f.DurationVar(&o.slo.E2E, "slo-e2e", 0, "objective: end-to-end latency")
	f.Float64Var(&o.slo.Floor, "slo-floor", 0, "share of requests that must meet the objectives (0..1): under it, slo_miss_phase")
	f.StringVar(&o.modelFile, "model-file", "", "the server's model (GGUF, safetensors, config.json, directory): adds mbu and ceiling_tps")
	f.StringVar(&o.roofline.GPU, "gpu", "", "the server's GPU in the built-in table (with --model-file)")
	f.Float64Var(&o.roofline.PeakBWGBps, "peak-bw-gbps", 0, "peak memory bandwidth per GPU, GB/s (with --model-file)")
	f.Float64Var(&o.roofline.PeakTFLOPS, "peak-tflops", 0, "dense peak TFLOPS per GPU (with --model-file)")
	f.IntVar(&o.roofline.TP, "tp", 0, "tensor-parallel GPUs (default: the server's GPUs, else 1)")
	f.Float64Var(&o.roofline.KVTokens, "kv-tokens", 0, "KV cache capacity in tokens (0: the KV is not counted)")
	f.Float64Var(&o.roofline.KVBytes, "kv-bytes", 0, "bytes per KV element (default 2)")
	f.Float64Var(&o.roofline.Speculative, "speculative", 0, "mean tokens per decode step (default 1)")
	return cmd
}

// options are the replay's settings from the flags.
func (o replayOpts) options() replay.Options {
	return replay.Options{LogFile: o.logFile, Year: o.year, StartedAt: o.startedAt, MetricsDir: o.metricsDir,
		GPUCSV: o.gpuCSV, Window: o.window, Server: o.server, Engine: o.engine, GPUs: o.gpus, Host: o.host, TZ: o.tz,
		Facts: analysis.Facts{SLO: o.slo}}
}
