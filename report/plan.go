package report

import (
	"context"
	"fmt"
	"time"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
)

// Ranges up to these read the raw windows or the hourly rollups; longer
// ones read the daily rollups.
const (
	RawUpTo    = 48 * time.Hour
	HourlyUpTo = 35 * 24 * time.Hour
)

// LevelFor picks the series a range reads.
func LevelFor(span time.Duration) string {
	switch {
	case span <= RawUpTo:
		return Raw
	case span <= HourlyUpTo:
		return Hourly
	}
	return Daily
}

// HourlyBucketsFrom is the shortest raw range charted in hourly buckets
// (24 to 48 of them, as the hourly level's longer ranges are). InfluxDB's
// cost of a per-interval query is about one aggregate per series, field
// and bucket: at 200 hosts × 8 GPUs, 10-minute buckets over a day took
// 3.2 s for the latency buckets, 2.3 s for the fleet's GPU time and
// 0.9 s for the servers' series, hourly ones 0.8, 0.6 and 0.2 s. Hourly
// buckets also lie whole in the hourly rollups, which then serve the
// fleet's sums per interval as they serve the totals (trendParts).
const HourlyBucketsFrom = 24 * time.Hour

// steps are the chart buckets a report may use.
var steps = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
	2 * 24 * time.Hour, 7 * 24 * time.Hour,
}

// Plan fills f's Level (when empty) and Interval: about 150 buckets over
// the range, none shorter than what the series resolve (the data's own
// window length for raw windows, an hour or a day for rollups), so a
// 10-minute report of 5-second windows still shows its phases; raw
// ranges of a day or more are hourly (HourlyBucketsFrom).
func Plan(ctx context.Context, c querier, f Filter) (Filter, error) {
	span := f.To.Sub(f.From)
	if span <= 0 {
		return f, fmt.Errorf("report: empty range %s – %s", f.From, f.To)
	}
	if f.Level == "" {
		f.Level = LevelFor(span)
	}
	var floor time.Duration
	switch f.Level {
	case Raw:
		w, err := DataWindow(ctx, c, f.From, f.To)
		if err != nil {
			return f, err
		}
		floor = w
	case Hourly:
		floor = time.Hour
	case Daily:
		floor = 24 * time.Hour
	default:
		return f, fmt.Errorf("report: level %q: want raw, 1h or 1d", f.Level)
	}
	want := max(floor, span/150)
	if f.Level == Raw && span >= HourlyBucketsFrom {
		want = max(want, time.Hour)
	}
	f.Interval = steps[len(steps)-1]
	for _, s := range steps {
		if s >= want {
			f.Interval = s
			break
		}
	}
	return f, nil
}

// DataWindow is the longest window length in the range, as the points
// say: their window_s, or for older points their spacing. Zero when the
// range holds no window.
func DataWindow(ctx context.Context, c querier, from, to time.Time) (time.Duration, error) {
	tf := fmt.Sprintf("time >= %dms AND time < %dms", from.UnixMilli(), to.UnixMilli())
	s, err := c.Query(ctx, fmt.Sprintf(`SELECT max(%q) AS "w" FROM %q WHERE `, schema.FieldWindowS, schema.Server)+tf)
	if err != nil {
		return 0, fmt.Errorf("report: window length: %w", err)
	}
	if len(s) > 0 && len(s[0].Values) > 0 {
		if v, ok := influxql.Num(s[0].Rows()[0]["w"]); ok && v > 0 {
			return time.Duration(v * float64(time.Second)), nil
		}
	}
	lens, err := WindowLengths(ctx, c, schema.Server, tf)
	if err != nil {
		return 0, err
	}
	var w time.Duration
	for _, l := range lens {
		w = max(w, l)
	}
	return w, nil
}
