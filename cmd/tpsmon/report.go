package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/report"
)

func newReportCmd() *cobra.Command {
	var (
		since          time.Duration
		host, server   string
		output, format string
		level          string
		prices         map[string]string
		fromS, toS     string
		floor          float64
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
			from, to, err := reportRange(cmd, fromS, toS, since, time.Now().UTC())
			if err != nil {
				return err
			}
			if !(floor > 0) || math.IsInf(floor, 0) {
				return fmt.Errorf("--per-user-floor %v: want a positive number of tokens/s", floor)
			}
			if format != "html" && format != "json" {
				return fmt.Errorf("--format %q: want html or json", format)
			}
			token, err := cfg.InfluxToken()
			if err != nil {
				return err
			}
			if level == "auto" {
				level = ""
			}
			opts, err := parsePrices(prices)
			if err != nil {
				return err
			}
			opts.PerUserFloor = floor
			f := report.Filter{From: from, To: to, Host: host, Server: server, Level: level}
			c, err := queryClient(cfg.Sink.Influx, token)
			if err != nil {
				return err
			}
			if f, err = report.Plan(cmd.Context(), c, f); err != nil {
				return err
			}
			r, err := report.Build(cmd.Context(), c, f, opts)
			if err != nil {
				return err
			}
			return writeReport(cmd, r, format, output)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&since, "since", 24*time.Hour, "how far back (from --to, or now)")
	f.StringVar(&fromS, "from", "", "start of the range (RFC3339); with --to, or --since after it")
	f.StringVar(&toS, "to", "", "end of the range (RFC3339; default now)")
	f.Float64Var(&floor, "per-user-floor", report.DefaultPerUserFloor, "per-user tokens/s objective of the operating curve's operating point")
	f.StringVar(&host, "host", "", "only this host")
	f.StringVar(&server, "server", "", "only this server")
	f.StringVar(&output, "output", "tpsmon-report.html", "file to write")
	f.StringVar(&format, "format", "html", "html or json")
	f.StringVar(&level, "level", "auto", "series to read: raw, 1h or 1d rollups, or auto (raw up to 48h, hourly up to 35d, daily beyond)")
	f.StringToStringVar(&prices, "price", nil, "price of a GPU-hour per GPU model (the name NVML reports), e.g. --price 'NVIDIA H100 80GB HBM3=2.49' --price '*=1.10'; * prices any other model")
	f.StringP("config", "c", config.DefaultPath, "configuration file (YAML)")
	addInfluxFlags(cmd)
	return cmd
}

// writeReport writes r as JSON or HTML: HTML always to output, JSON to
// stdout unless --output was given.
func writeReport(cmd *cobra.Command, r *report.Report, format, output string) error {
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
}

// parsePrices reads --price MODEL=PRICE pairs.
func parsePrices(in map[string]string) (report.Options, error) {
	o := report.Options{}
	for model, v := range in {
		p, err := strconv.ParseFloat(v, 64)
		if err != nil || p < 0 || math.IsInf(p, 0) || math.IsNaN(p) {
			return o, fmt.Errorf("--price %s=%s: want a non-negative number per GPU-hour", model, v)
		}
		if o.Prices == nil {
			o.Prices = map[string]float64{}
		}
		o.Prices[model] = p
	}
	return o, nil
}

// reportRange is the report's [from, to): --to (or now) back --since, or
// --from to --to (or --from plus --since when only --since was given).
func reportRange(cmd *cobra.Command, fromS, toS string, since time.Duration, now time.Time) (time.Time, time.Time, error) {
	parse := func(name, v string) (time.Time, error) {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return t, fmt.Errorf("--%s %q: want RFC3339 (2006-01-02T15:04:05Z): %w", name, v, err)
		}
		return t.UTC(), nil
	}
	to := now
	if toS != "" {
		t, err := parse("to", toS)
		if err != nil {
			return to, to, err
		}
		to = t
	}
	from := to.Add(-since)
	if fromS != "" {
		t, err := parse("from", fromS)
		if err != nil {
			return from, to, err
		}
		from = t
		if toS == "" && cmd.Flags().Changed("since") {
			to = from.Add(since)
		}
	}
	if !from.Before(to) {
		return from, to, fmt.Errorf("report: --from %s is not before --to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return from, to, nil
}
