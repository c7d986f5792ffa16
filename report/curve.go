package report

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
)

// The operating curve's reads: every raw window's concurrency and rates
// (the curve's quantiles are exact), or the curve rollups' cells over the
// range, summed by InfluxDB per series (curve.RollupExactness), and per
// series its best window, for the frontier. Sums of few fields on
// purpose: InfluxDB's cost is per value read, and 81 histogram fields took
// 2m25s at 200 servers over 30 days, six medians 1m16s. Whole days of an
// hourly range are read from the daily cells (24 times fewer values), the
// hours at its ends from the hourly ones.
var (
	curveGroup  = `GROUP BY "` + strings.Join(curve.KeyTags, `", "`) + `"`
	rollupCurve = `"tpsmon_$level"."` + schema.Curve + `_$level"`

	CurveWindows = Query{Name: "curve_windows",
		Text: `SELECT "` + strings.Join(curve.RawFields, `", "`) + `" FROM ` + rawServer + ` ` + serverWhere + ` ` + curveGroup}
	CurveCells = Query{Name: "curve_cells",
		Rollup: `SELECT ` + curveCellSelect() + ` FROM ` + rollupCurve + ` ` + serverWhere + ` ` + curveGroup + `, "` + schema.TagRunningBin + `", "` + schema.TagKind + `"`}
	CurveBest = Query{Name: "curve_best",
		Rollup: fmt.Sprintf(`SELECT max(%q) AS %q, %q, %q FROM `, schema.FieldSysMax, schema.FieldSysMax, schema.FieldUserAtMax, schema.FieldRunAtMax) +
			rollupCurve + ` ` + serverWhere + ` ` + curveGroup + `, "` + schema.TagRunningBin + `", "` + schema.TagKind + `"`}
)

// DefaultPerUserFloor is the per-user objective (tokens/s) when none is
// configured.
const DefaultPerUserFloor = 20.0

// operatingCurve reads the curve of each server and puts its curves, with
// the operating point under the floor, on the server's report.
func (b *builder) operatingCurve(floor float64) error {
	cb, err := b.readCurve()
	if err != nil {
		return err
	}
	for _, c := range cb.Curves(curve.Options{Floor: floor}) {
		s := b.server(map[string]string{schema.TagHost: c.Host, schema.TagServer: c.Server})
		s.OperatingCurve = append(s.OperatingCurve, c)
	}
	if len(cb.Skipped) > 0 {
		b.r.CurveSkipped = cb.Skipped
	}
	return nil
}

// OperatingCurves reads the curves of f's range alone, with the windows
// or cells left out by reason: what Build adds for them.
func OperatingCurves(ctx context.Context, c querier, f Filter, floor float64) ([]curve.Curve, map[string]int, error) {
	b := &builder{ctx: ctx, c: c, f: f, r: &Report{}, lens: map[string]map[string]time.Duration{}}
	cb, err := b.readCurve()
	if err != nil {
		return nil, nil, err
	}
	return cb.Curves(curve.Options{Floor: floor}), cb.Skipped, nil
}

// readCurve gathers the range's windows, or its rollup cells.
func (b *builder) readCurve() (*curve.Builder, error) {
	cb := curve.NewBuilder()
	if b.f.Level == Raw || b.f.Level == "" {
		err := b.rows(CurveWindows, "", func(tags map[string]string, row map[string]any) error {
			var secs float64
			if _, ok := influxql.Num(row[schema.FieldWindowS]); !ok {
				l, err := b.hostLength(tags[schema.TagHost])
				if err != nil {
					return err
				}
				secs = l
			}
			cb.Add(curve.WindowOf(tags, row, influxql.Num, secs))
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else {
		for _, part := range curveParts(b.f) {
			if err := b.curveCells(cb, part); err != nil {
				return nil, err
			}
		}
	}
	return cb, nil
}

func cellID(tags map[string]string) string {
	var s []string
	for _, k := range append(append([]string{}, curve.KeyTags...), schema.TagRunningBin, schema.TagKind) {
		s = append(s, tags[k])
	}
	return strings.Join(s, "\x00")
}

// hostLength is a host's window length in seconds, read from the spacing
// of its server windows, for points without window_s.
func (b *builder) hostLength(host string) (float64, error) {
	row := map[string]any{"windows": 1.0, "seconds": 0.0, "timed": 0.0}
	return b.seconds(schema.Server, host, row)
}

func (o Options) floor() float64 {
	switch {
	case o.PerUserFloor == 0:
		return DefaultPerUserFloor
	case o.PerUserFloor < 0:
		return 0
	}
	return o.PerUserFloor
}

// curveCellSelect sums a curve series' fields over the range.
func curveCellSelect() string {
	var sel []string
	for _, f := range curve.CellFields {
		sel = append(sel, fmt.Sprintf(`sum(%q) AS %q`, f, f))
	}
	return strings.Join(sel, ", ")
}

// curveParts splits a rollup range: at the hourly level its whole UTC days
// read the daily cells, the hours before and after them the hourly ones.
func curveParts(f Filter) []Filter {
	if f.Level != Hourly {
		return []Filter{f}
	}
	d0 := f.From.UTC().Truncate(24 * time.Hour)
	if d0.Before(f.From) {
		d0 = d0.Add(24 * time.Hour)
	}
	d1 := f.To.UTC().Truncate(24 * time.Hour)
	if d1.Sub(d0) < 24*time.Hour {
		return []Filter{f}
	}
	var out []Filter
	for _, p := range []struct {
		level    string
		from, to time.Time
	}{{Hourly, f.From, d0}, {Daily, d0, d1}, {Hourly, d1, f.To}} {
		if p.from.Before(p.to) {
			g := f
			g.Level, g.From, g.To = p.level, p.from, p.to
			out = append(out, g)
		}
	}
	return out
}

// curveCells reads the curve cells of one part of the range into cb.
func (b *builder) curveCells(cb *curve.Builder, f Filter) error {
	read := func(q Query, each func(tags map[string]string, row map[string]any)) error {
		text, err := f.Render(q, "")
		if err != nil {
			return err
		}
		series, err := b.c.Query(b.ctx, text)
		if err != nil {
			return fmt.Errorf("%s: %w", q.Name, err)
		}
		for _, s := range series {
			for _, row := range s.Rows() {
				each(s.Tags, row)
			}
		}
		return nil
	}
	best := map[string]*curve.Pair{}
	err := read(CurveBest, func(tags map[string]string, row map[string]any) {
		if p := curve.BestFromRow(row, influxql.Num); p != nil {
			best[cellID(tags)] = p
		}
	})
	if err != nil {
		return err
	}
	return read(CurveCells, func(tags map[string]string, row map[string]any) {
		x := curve.CellFromRow(curve.KeyOf(tags), tags[schema.TagRunningBin], tags[schema.TagKind], row, influxql.Num)
		x.Best = best[cellID(tags)]
		cb.AddCell(x)
	})
}
