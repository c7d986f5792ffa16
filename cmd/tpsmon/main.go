// Command tpsmon monitors GPU inference nodes: it samples the GPUs, reads
// tokens per second from the inference servers, joins both in aligned
// windows and writes the joined series to InfluxDB.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/preflight"
	_ "github.com/tpsmon/tpsmon/internal/maxprocs" // one P, set before the other initialisers run
	"github.com/tpsmon/tpsmon/internal/redact"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

// defaultConfig is --config's default: the packaged file (a test may
// point it elsewhere).
var defaultConfig = config.DefaultPath

// extraCommands are commands only some builds carry (man: -tags manpages).
var extraCommands []func() *cobra.Command

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	var told preflight.Reported
	switch {
	case errors.As(err, &told):
		os.Exit(max(told.Code, 1))
	case err != nil:
		// Errors may quote a URL (net/http's do): never its credentials.
		fmt.Fprintln(os.Stderr, "tpsmon:", redact.Text(err.Error()))
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "tpsmon",
		Short:         "Is this GPU turning into tokens? GPU and inference-server telemetry, joined, into InfluxDB.",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version is ours, not cobra's: cobra prints its own line through
		// text/template, whose method calls by name keep every exported
		// method of every type in the binary (4.3 MB with the report's
		// page, which templ writes instead).
		RunE: func(cmd *cobra.Command, _ []string) error {
			if v, _ := cmd.Flags().GetBool("version"); v {
				_, err := fmt.Fprint(cmd.OutOrStdout(), versionLine())
				return err
			}
			return cmd.Help()
		},
	}
	root.Flags().BoolP("version", "v", false, "print the version")
	root.AddCommand(newRunCmd(), newDemoCmd(), newReplayCmd(), newCheckCmd(), newReportCmd(), newRollupCmd(), newTopCmd(), newRooflineCmd(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprint(cmd.OutOrStdout(), versionLine())
		},
	})
	for _, c := range extraCommands {
		root.AddCommand(c())
	}
	return root
}

// versionLine is what `tpsmon version` and `tpsmon --version` print.
func versionLine() string {
	return fmt.Sprintf("tpsmon %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// addConfigFlags adds --config and the flags that override config keys.
func addConfigFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringP("config", "c", defaultConfig, "configuration file (YAML)")
	f.String("host", "", "host tag (default: the hostname)")
	f.Duration("window", 0, "window length, e.g. 10s")
	f.Duration("grace", 0, "how long a window waits for late samples")
	f.String("gpu-backend", "", "nvml, sim or none")
	addInfluxFlags(cmd)
	f.String("log-level", "", "debug, info, warn or error")
}

func addInfluxFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("influx-url", "", "InfluxDB URL (empty: no InfluxDB)")
	f.String("org", "", "InfluxDB organisation (empty for 1.8)")
	f.String("bucket", "", `InfluxDB bucket ("db/rp" for 1.8)`)
	f.String("token-file", "", "file holding the InfluxDB token")
}

// configFromFlags loads the configuration named by --config.
func configFromFlags(cmd *cobra.Command) (*config.Config, error) {
	path, _ := cmd.Flags().GetString("config")
	return config.Load(path, cmd.Flags().Changed("config"), cmd.Flags())
}
