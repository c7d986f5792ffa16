package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/collector"
)

func newCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the configuration, the GPUs, the servers and InfluxDB",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			path, _ := cmd.Flags().GetString("config")
			cfg, err := configFromFlags(cmd)
			if err != nil {
				fmt.Fprintf(w, "FAIL  %v\n", err)
				return errors.New("check failed: the configuration is invalid")
			}
			fmt.Fprintf(w, "ok    config %s\n", path)
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			if n := check(ctx, cfg, w); n > 0 {
				return fmt.Errorf("check failed: %d problem(s)", n)
			}
			return nil
		},
	}
	addConfigFlags(cmd)
	return cmd
}

// check probes everything the daemon needs and returns the problems found.
func check(ctx context.Context, cfg *Config, w io.Writer) int {
	problems := 0
	report := func(err error, okMsg string, args ...any) {
		if err != nil {
			problems++
			fmt.Fprintf(w, "FAIL  %v\n", err)
			return
		}
		fmt.Fprintf(w, "ok    "+okMsg+"\n", args...)
	}
	if open := openBackend(cfg, nil); open != nil {
		g, err := open()
		if err == nil {
			n := len(g.Sample(time.Now()))
			g.Close()
			report(nil, "gpu backend %s: %d GPUs", cfg.GPU.Backend, n)
		} else {
			report(fmt.Errorf("gpu backend %s: %w", cfg.GPU.Backend, err), "")
		}
	} else {
		report(nil, "gpu backend none: GPUs are not sampled")
	}
	client := &http.Client{Timeout: 5 * time.Second}
	servers := cfg.Servers
	if len(servers) == 0 && cfg.Discovery.Enabled {
		servers = discover(ctx, client, cfg.Discovery.Ports, quietLogger())
		if len(servers) == 0 {
			report(fmt.Errorf("servers: none configured and none found on ports %v", cfg.Discovery.Ports), "")
		}
	}
	for _, s := range servers {
		d, err := collector.DialectFor(s.Engine)
		if err != nil {
			report(fmt.Errorf("server %s: %w", s.Name, err), "")
			continue
		}
		sc := &collector.Scraper{Server: s.Name, URL: s.MetricsURL, Interval: time.Second, Dialect: d, Client: client}
		r := sc.Scrape(ctx)
		report(r.Err, "server %s: %s metrics at %s (model %q)", s.Name, d.Engine, s.MetricsURL, r.Sample.Model)
	}
	if cfg.Sink.Influx.URL == "" {
		report(nil, "influx: none configured; points go to %s", cfg.Sink.File.Path)
		return problems
	}
	in, err := cfg.influxClient()
	if err != nil {
		report(err, "")
		return problems
	}
	defer in.Close()
	report(in.Ping(ctx), "influx %s reachable", cfg.Sink.Influx.URL)
	return problems
}
