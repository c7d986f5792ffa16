package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/rollup"
	"github.com/tpsmon/tpsmon/sink"
)

func newRollupCmd() *cobra.Command {
	var (
		hourlyBucket, dailyBucket string
		hourlyRP, dailyRP         string
		delay, maxCatchUp         time.Duration
		recheck                   int
	)
	cmd := &cobra.Command{
		Use:   "rollup",
		Short: "Roll raw windows up into hourly and daily series (run by tpsmon-rollup.timer on one machine)",
		Long: `rollup reads the raw windows with InfluxQL (the v1 /query API of InfluxDB 1.x,
of 2.x with DBRP mappings, and of 3.x) and writes hourly and daily series
stamped with the start of their period: tpsmon_server_1h/_1d (tokens, energy,
means, windows, seconds and GPU-seconds per state) and tpsmon_gpu_1h/_1d. It is
idempotent and catches up: each run starts a few periods before the newest
rollup (windows delivered late) and walks to the last complete period.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := configFromFlags(cmd)
			if err != nil {
				return err
			}
			ic := cfg.Sink.Influx
			if ic.URL == "" {
				return errors.New("rollup: no InfluxDB: set sink.influx.url or --influx-url")
			}
			if recheck < 0 || delay < 0 || maxCatchUp <= 0 {
				return fmt.Errorf("rollup: --recheck %d, --delay %v, --max-catch-up %v: want non-negative, non-negative, positive", recheck, delay, maxCatchUp)
			}
			token, err := cfg.InfluxToken()
			if err != nil {
				return err
			}
			if hourlyBucket == "" {
				hourlyBucket = rollupBucket(ic.Bucket, hourlyRP)
			}
			if dailyBucket == "" {
				dailyBucket = rollupBucket(ic.Bucket, dailyRP)
			}
			h, err := rollupLevel(ic, token, time.Hour, report.Hourly, hourlyBucket, hourlyRP, recheck)
			if err != nil {
				return err
			}
			d, err := rollupLevel(ic, token, 24*time.Hour, report.Daily, dailyBucket, dailyRP, recheck)
			if err != nil {
				return err
			}
			q, err := queryClient(ic, token)
			if err != nil {
				return err
			}
			now := time.Now().UTC()
			j := &rollup.Job{Q: q, Levels: []rollup.Level{h, d},
				Delay: delay, First: now.Add(-maxCatchUp), Chunk: 24,
				Log: func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), "tpsmon: "+format+"\n", args...) }}
			res, err := j.Run(cmd.Context(), now)
			for _, r := range res {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s – %s, %d points\n", strings.TrimPrefix(r.Suffix, "_"),
					r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), r.Points)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&hourlyRP, "hourly-rp", "tpsmon_1h", "retention policy the hourly series are read from (InfluxQL)")
	f.StringVar(&dailyRP, "daily-rp", "tpsmon_1d", "retention policy the daily series are read from (InfluxQL)")
	f.StringVar(&hourlyBucket, "hourly-bucket", "", `bucket the hourly series are written to (default: "<db>/<hourly-rp>" for a 1.x "db/rp" bucket, else <hourly-rp>)`)
	f.StringVar(&dailyBucket, "daily-bucket", "", "bucket the daily series are written to (default as for --hourly-bucket)")
	f.DurationVar(&delay, "delay", 5*time.Minute, "how long after its end a period counts as complete")
	f.IntVar(&recheck, "recheck", 3, "periods before the newest rollup rolled up again, for windows delivered late")
	f.DurationVar(&maxCatchUp, "max-catch-up", 400*24*time.Hour, "how far back the first run reads")
	f.StringP("config", "c", config.DefaultPath, "configuration file (YAML)")
	addInfluxFlags(cmd)
	return cmd
}

// rollupBucket is the default bucket a level's series are written to,
// beside the raw windows' bucket.
func rollupBucket(raw, rp string) string {
	if db, _, hasRP := strings.Cut(raw, "/"); hasRP {
		return db + "/" + rp // 1.x: database/retention policy
	}
	return rp // 2.x: a bucket of that name, DBRP-mapped to db/rp
}

// rollupLevel is one level of the rollup job, writing to bucket.
func rollupLevel(ic sink.InfluxConfig, token string, every time.Duration, lv, bucket, rp string, recheck int) (rollup.Level, error) {
	ic.Bucket, ic.Token, ic.UserAgent = bucket, token, "tpsmon/"+version
	out, err := sink.NewInflux(ic)
	if err != nil {
		return rollup.Level{}, err
	}
	return rollup.Level{Every: every, Suffix: "_" + lv, RP: rp, Out: out, Recheck: recheck}, nil
}
