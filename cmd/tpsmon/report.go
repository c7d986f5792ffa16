package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/report"
)

func newReportCmd() *cobra.Command {
	var (
		since          time.Duration
		host, server   string
		output, format string
	)
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Write a self-contained HTML (or JSON) report of where GPU time went",
		Long: `report reads a time range from InfluxDB and writes one self-contained HTML
file (no network resources; charts as inline SVG): GPU-hours per state with the
servers responsible, TPS, per-user TPS, concurrency and GPU utilization over time
per server, utilization against TPS, tokens per joule, and a sentence per finding.
The InfluxDB settings come from the configuration; the flags override them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFromFlags(cmd)
			if err != nil {
				return err
			}
			if cfg.Sink.Influx.URL == "" {
				return errors.New("report: no InfluxDB: set sink.influx.url or --influx-url")
			}
			if since <= 0 {
				return fmt.Errorf("--since %v must be positive", since)
			}
			if format != "html" && format != "json" {
				return fmt.Errorf("--format %q: want html or json", format)
			}
			token, err := cfg.influxToken()
			if err != nil {
				return err
			}
			to := time.Now().UTC()
			f := report.Filter{From: to.Add(-since), To: to, Host: host, Server: server, Interval: reportInterval(since)}
			c := report.NewClient(cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket, token, cfg.Sink.Influx.Timeout)
			r, err := report.Build(cmd.Context(), c, f, cfg.Window)
			if err != nil {
				return err
			}
			var w io.Writer = cmd.OutOrStdout()
			if format == "html" || cmd.Flags().Changed("output") {
				file, err := os.Create(output)
				if err != nil {
					return fmt.Errorf("--output: %w", err)
				}
				defer file.Close()
				w = file
			}
			if format == "json" {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			if err := report.WriteHTML(w, r); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "tpsmon: report written to %s (%d findings)\n", output, len(r.Findings))
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&since, "since", 24*time.Hour, "how far back")
	f.StringVar(&host, "host", "", "only this host")
	f.StringVar(&server, "server", "", "only this server")
	f.StringVar(&output, "output", "tpsmon-report.html", "file to write")
	f.StringVar(&format, "format", "html", "html or json")
	f.StringP("config", "c", defaultConfigPath, "configuration file (YAML)")
	addInfluxFlags(cmd)
	return cmd
}

// reportInterval picks a chart resolution of about 200 points.
func reportInterval(since time.Duration) time.Duration {
	return max(time.Minute, (since / 200).Round(time.Minute))
}
