package rollup

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
)

// The curve rollup (tpsmon_curve_<level>): per server series and period
// one point whose cells field holds a record per kind and concurrency bin:
// the windows' count, GPU-seconds, running sum, the period's p10/median/
// p90 of both rates (exact over its windows) times its windows, and its
// best window (analysis/curve Cells). The server rollup's means cannot
// give the curve: an hour's mean of running mixes its concurrencies, and
// medians do not add. Histograms would, but InfluxDB's cost is per series
// and field read: a field per rate bucket made the report's read of 30
// days at 200 servers take minutes, a series per bin with a field per
// number 10-20 s; one string per server and period takes 1-2 s.
//
// InfluxQL cannot bin by a computed value, so the raw windows are read
// (the curve's fields only) at most an hour at a time and binned here.

// curveRead is the most raw time one curve query reads: an hour of a
// large fleet's windows is a few MB of JSON.
const curveRead = time.Hour

// rollCurve appends the curve points of [a, b) at level l to buf, a
// period at a time: a cell's quantiles need its windows' values, which
// are held for one period only.
func (j *Job) rollCurve(ctx context.Context, l Level, a, b time.Time, enc *sink.Encoder, buf []byte) ([]byte, int, error) {
	n := 0
	for p := a; p.Before(b); p = p.Add(l.Every) {
		q := p.Add(l.Every)
		if q.After(b) {
			q = b
		}
		var k int
		var err error
		if buf, k, err = j.rollCurvePeriod(ctx, l, p, q, enc, buf); err != nil {
			return buf, n, err
		}
		n += k
	}
	return buf, n, nil
}

func (j *Job) rollCurvePeriod(ctx context.Context, l Level, a, b time.Time, enc *sink.Encoder, buf []byte) ([]byte, int, error) {
	cells := curve.NewCells(l.Every)
	for lo := a; lo.Before(b); lo = lo.Add(curveRead) {
		hi := lo.Add(curveRead)
		if hi.After(b) {
			hi = b
		}
		tf := fmt.Sprintf("time >= %dms AND time < %dms", lo.UnixMilli(), hi.UnixMilli())
		q := fmt.Sprintf(`SELECT "%s" FROM %s WHERE %s GROUP BY *`, strings.Join(curve.RawFields, `", "`), from("", schema.Server), tf)
		series, err := j.Q.Query(ctx, q)
		if err != nil {
			return buf, 0, err
		}
		var lens map[string]time.Duration
		for _, s := range series {
			for _, row := range s.Rows() {
				var secs float64
				if _, ok := influxql.Num(row[schema.FieldWindowS]); !ok {
					if lens == nil {
						if lens, err = report.WindowLengths(ctx, j.Q, schema.Server, tf); err != nil {
							return buf, 0, err
						}
					}
					secs = lens[s.Tags[schema.TagHost]].Seconds()
				}
				t, _ := influxql.Num(row["time"])
				cells.Add(s.Tags, time.Unix(int64(t), 0), curve.WindowOf(s.Tags, row, influxql.Num, secs))
			}
		}
	}
	delete(cells.Skipped, curve.SkipNoRunning) // engines that report no running requests: no curve, nothing wrong
	if len(cells.Skipped) > 0 && j.Log != nil {
		j.Log("rollup %s: curve: %s – %s: windows left out: %v", l.Suffix, a.Format(time.RFC3339), b.Format(time.RFC3339), cells.Skipped)
	}
	n := 0
	err := cells.Each(func(tags map[string]string, period time.Time, fields map[string]any) error {
		var err error
		buf, err = enc.AppendWrite(buf, write.NewPoint(schema.Curve+l.Suffix, tags, fields, period))
		n++
		return err
	})
	return buf, n, err
}
