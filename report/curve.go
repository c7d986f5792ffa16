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
// range: one string field per server and period (schema.FieldCells),
// summed here (curve.RollupExactness). InfluxDB's cost is per series and
// field read: 81 histogram fields took 2m25s at 200 servers over 30 days,
// a series per bin with 14 fields 10-20 s. Whole days of an hourly range
// are read from the daily points (24 times fewer), the hours at its ends
// from the hourly ones.
var (
	curveGroup  = `GROUP BY "` + strings.Join(curve.KeyTags, `", "`) + `"`
	rollupCurve = `"tpsmon_$level"."` + schema.Curve + `_$level"`

	CurveWindows = Query{Name: "curve_windows",
		Text: `SELECT "` + strings.Join(curve.RawFields, `", "`) + `" FROM ` + rawServer + ` ` + serverWhere + ` ` + curveGroup}
	CurveCells = Query{Name: "curve_cells",
		Rollup: fmt.Sprintf(`SELECT %q FROM `, schema.FieldCells) + rollupCurve + ` ` + serverWhere + ` ` + curveGroup}
	// CurveSketches are the cells with their sketches, which a raw range
	// reads for its rolled-up hours: quantiles within
	// curve.SketchAccuracy and the frontier exact, where the cells alone
	// would give means of each hour's quantiles.
	CurveSketches = Query{Name: "curve_sketches",
		Rollup: fmt.Sprintf(`SELECT %q, %q FROM `, schema.FieldCells, schema.FieldSketches) + rollupCurve + ` ` + serverWhere + ` ` + curveGroup}
	// CurveFloor is the per-user floor as the dashboard's curve panel
	// draws it: a point at the floor ($per_user_floor, the dashboard's
	// variable; the report's default where the report renders it) at each
	// interval's highest system TPS, so that joined they are a vertical
	// line through the windows' cloud.
	CurveFloor = Query{Name: "curve_floor",
		Text: `SELECT max("` + schema.FieldSystemTPS + `") * 0 + $per_user_floor AS "` + colFloor + `", max("` + schema.FieldSystemTPS + `") AS "` + colFloorSystemTPS + `" FROM ` + rawServer + ` ` + serverWhere + ` GROUP BY time($__interval) fill(none)`}
)

// The floor series' columns.
const (
	colFloor          = "per_user_floor"
	colFloorSystemTPS = "floor_system_tps"
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
	if f.Level == Raw || f.Level == "" {
		b.parts = rangeParts(ctx, c, f)
	}
	var err error
	if b.curveParts, err = b.curveRangeParts(); err != nil {
		return nil, nil, err
	}
	cb, err := b.readCurve()
	if err != nil {
		return nil, nil, err
	}
	return cb.Curves(curve.Options{Floor: floor}), cb.Skipped, nil
}

// curvePart is one part of the range and the curve's query of it.
type curvePart struct {
	f Filter
	q Query
}

// readCurve gathers the range's windows, or its rollup cells: a raw
// range's rolled-up hours are read from the cells with their sketches.
func (b *builder) readCurve() (*curve.Builder, error) {
	cb := curve.NewBuilder()
	r := curve.NewRanged()
	for _, part := range b.curveParts {
		text, err := part.f.Render(part.q, "")
		if err != nil {
			return nil, err
		}
		if part.q.Name == CurveWindows.Name {
			err = b.seriesRows(part.q.Name, text, func(tags map[string]string, row map[string]any) error {
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
		} else {
			err = b.seriesRows(part.q.Name, text, func(tags map[string]string, row map[string]any) error {
				cells, _ := row[schema.FieldCells].(string)
				sketches, _ := row[schema.FieldSketches].(string)
				r.Add(tags, cells, sketches) // a bad field is counted (bad_cell)
				return nil
			})
		}
		if err != nil {
			return nil, err
		}
	}
	r.Into(cb)
	return cb, nil
}

// curveRangeParts splits the range for the operating curve: a raw range
// as its totals are, its rolled-up hours read from the cells with their
// sketches where the rollups have them; a rollup range as curveParts
// does, from the cells.
func (b *builder) curveRangeParts() ([]curvePart, error) {
	var out []curvePart
	if b.f.Level != Raw && b.f.Level != "" {
		for _, f := range curveParts(b.f) {
			out = append(out, curvePart{f, CurveCells})
		}
		return out, nil
	}
	parts, err := b.withField(b.totalParts(), schema.Curve, schema.FieldSketches)
	if err != nil {
		return nil, err
	}
	for _, f := range parts {
		q := CurveWindows
		if f.Level != b.f.Level {
			q = CurveSketches
		}
		out = append(out, curvePart{f, q})
	}
	return out, nil
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
