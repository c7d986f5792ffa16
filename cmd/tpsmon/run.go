package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/internal/agent"
	"github.com/tpsmon/tpsmon/internal/config"
	"github.com/tpsmon/tpsmon/internal/logging"
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
			log, level := logging.New(cfg.Log.Level)
			for _, name := range config.UnknownEnv() {
				log.Warn("environment variable names no configuration key; ignored", "name", name)
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
	return cmd
}
