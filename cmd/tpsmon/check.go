package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tpsmon/tpsmon/daemon/preflight"
	"github.com/tpsmon/tpsmon/internal/redact"
)

func newCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the configuration, the GPUs, the servers and InfluxDB",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			if asRoot, _ := cmd.Flags().GetBool("as-root"); !asRoot {
				if ran, err := preflight.AsServiceUser(w, checkArgs(cmd)); ran {
					return err
				}
			}
			path, _ := cmd.Flags().GetString("config")
			cfg, err := configFromFlags(cmd)
			if err != nil {
				fmt.Fprintf(w, "FAIL  %s\n", redact.Text(err.Error()))
				return errors.New("check failed: the configuration is invalid")
			}
			if cfg.File() == "" {
				// Only the default path may be missing (an explicit one
				// failed above): say that nothing was read.
				fmt.Fprintf(w, "note  config %s: no such file; running on the defaults (and TPSMON_* variables, flags)\n", path)
			} else {
				fmt.Fprintf(w, "ok    config %s\n", cfg.File())
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			if n := preflight.Run(ctx, cfg, version, w); n > 0 {
				return fmt.Errorf("check failed: %d problem(s)", n)
			}
			return nil
		},
	}
	addConfigFlags(cmd)
	cmd.Flags().Bool("as-root", false, "run as root: probe as root rather than as the service user "+preflight.ServiceUser)
	return cmd
}

// checkArgs is this check's command line, for running it again as the
// service user.
func checkArgs(cmd *cobra.Command) []string {
	args := []string{"check"}
	cmd.Flags().Visit(func(f *pflag.Flag) {
		args = append(args, "--"+f.Name+"="+f.Value.String())
	})
	return args
}
