package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/agent"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/internal/heapgoal"
	"github.com/tpsmon/tpsmon/internal/logging"
	"github.com/tpsmon/tpsmon/sink"
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
			if os.Getenv("GOGC") == "" {
				// The daemon's live heap is small: while it allocates
				// slowly, collect at 1 MB or twice the live heap rather
				// than at the runtime's 4 MB.
				ctx, stop := context.WithCancel(cmd.Context())
				done := make(chan struct{})
				go func() { heapgoal.Run(ctx); close(done) }()
				defer func() { stop(); <-done }()
			}
			cfg, err := configFromFlags(cmd)
			if err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			log, level := logging.New(cfg.Log.Level)
			for _, name := range config.UnknownEnv() {
				log.Warn("environment variable names no configuration key; ignored", "name", name)
			}
			if once, _ := cmd.Flags().GetBool("once"); once {
				// What the daemon would write, once: nothing goes to
				// InfluxDB, no state is kept, no port is taken.
				cfg.Sink.Influx.URL, cfg.HTTP.Listen = "", ""
				ctx, cancel := context.WithCancel(cmd.Context())
				defer cancel()
				return agent.New(cfg, agent.Options{Log: log, Version: version,
					Outputs: []agent.WindowWriter{&firstWindow{w: cmd.OutOrStdout(), done: cancel}}}).Run(ctx)
			}
			return agent.New(cfg, agent.Options{
				Log:      log,
				Version:  version,
				Reload:   hup,
				Load:     func() (*config.Config, error) { return configFromFlags(cmd) },
				SetLevel: func(l string) { level.Set(logging.ParseLevel(l)) },
			}).Run(cmd.Context())
		},
	}
	addConfigFlags(cmd)
	cmd.Flags().Bool("once", false, "run until the first window closes, print its points (line protocol) to stdout and exit; writes nothing to InfluxDB")
	return cmd
}

// firstWindow prints the first points written, in line protocol, and
// ends the run; the open windows closed at shutdown are not printed.
type firstWindow struct {
	w       io.Writer
	done    func()
	printed bool
}

func (f *firstWindow) WriteWindows(cs []analysis.Closed) error {
	if f.printed {
		return nil
	}
	f.printed = true
	defer f.done()
	return sink.NewLPWriter(f.w).WriteWindows(cs)
}
