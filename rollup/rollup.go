// Package rollup summarises tpsmon's raw windows into hourly and daily
// series, on any InfluxDB that serves InfluxQL on the v1 /query API (1.x;
// 2.x with DBRP mappings; 3.x): it reads with InfluxQL and writes line
// protocol through the same client as the daemon. Each rollup point is
// stamped with the start of the hour or day it summarises. A run is
// idempotent (a point for the same period and tags overwrites the last
// one) and catches up: it starts from the newest rollup already written,
// re-rolls a few periods before it for late deliveries, and walks forward
// to the last complete period.
package rollup

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
)

// Querier runs InfluxQL on the v1 /query API.
type Querier interface {
	Query(ctx context.Context, q string) ([]influxql.Series, error)
}

// Writer stores line protocol in one bucket.
type Writer interface {
	Write(ctx context.Context, lines []byte) error
}

// Level is one resolution of rollups: where its points go and how long
// each period is.
type Level struct {
	Every time.Duration
	// Suffix names its measurements: tpsmon_server + "_1h".
	Suffix string
	// RP is the retention policy its measurements are read from in
	// InfluxQL ("" for the raw windows' own); Out is where they are
	// written.
	RP  string
	Out Writer
	// Recheck is how many periods before the newest rollup are rolled up
	// again on each run, for windows delivered late (a spool draining
	// after an outage).
	Recheck int
}

// Job rolls raw windows up into every level.
type Job struct {
	Q      Querier
	Levels []Level
	// Delay is how long after a period ends before it counts as complete:
	// windows are written when they close, and a daemon's spool may lag.
	Delay time.Duration
	// First bounds the first run's catch-up: nothing older is read.
	First time.Time
	// Chunk is the most periods one query reads.
	Chunk int
	Log   func(format string, args ...any)
}

// Result says what one level did.
type Result struct {
	Suffix   string
	From, To time.Time
	Points   int
}

// Run rolls every level up to the last complete period before now.
func (j *Job) Run(ctx context.Context, now time.Time) ([]Result, error) {
	var out []Result
	for _, l := range j.Levels {
		r, err := j.level(ctx, l, now)
		if err != nil {
			return out, fmt.Errorf("rollup %s: %w", l.Suffix, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func (j *Job) level(ctx context.Context, l Level, now time.Time) (Result, error) {
	res := Result{Suffix: l.Suffix}
	end := now.Add(-j.Delay).Truncate(l.Every)
	start, err := j.resume(ctx, l)
	if err != nil {
		return res, err
	}
	if start.IsZero() {
		if start, err = j.firstRaw(ctx); err != nil {
			return res, err
		}
		if start.IsZero() {
			return res, nil // no raw window yet
		}
	}
	if start.Before(j.First) {
		start = j.First
	}
	start = start.Truncate(l.Every)
	res.From, res.To = start, end
	chunk := max(1, j.Chunk)
	for a := start; a.Before(end); {
		b := a.Add(time.Duration(chunk) * l.Every)
		if b.After(end) {
			b = end
		}
		n, err := j.rollRange(ctx, l, a, b)
		if err != nil {
			return res, err
		}
		res.Points += n
		a = b
	}
	return res, nil
}

// resume returns where this level picks up: Recheck periods before its
// newest point, or zero when it has none.
func (j *Job) resume(ctx context.Context, l Level) (time.Time, error) {
	var newest time.Time
	for _, m := range Measurements {
		s, err := j.Q.Query(ctx, fmt.Sprintf(`SELECT last(%q) FROM %s`, schema.FieldWindows, from(l.RP, m+l.Suffix)))
		if err != nil {
			return time.Time{}, err
		}
		if t, ok := firstTime(s); ok && t.After(newest) {
			newest = t
		}
	}
	if newest.IsZero() {
		return newest, nil
	}
	return newest.Add(-time.Duration(l.Recheck) * l.Every), nil
}

func (j *Job) firstRaw(ctx context.Context) (time.Time, error) {
	var first time.Time
	for _, m := range Measurements {
		s, err := j.Q.Query(ctx, fmt.Sprintf(`SELECT first(%q) FROM %s`, schema.FieldCoverage, from("", m)))
		if err != nil {
			return time.Time{}, err
		}
		if t, ok := firstTime(s); ok && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first, nil
}

func firstTime(s []influxql.Series) (time.Time, bool) {
	if len(s) == 0 || len(s[0].Values) == 0 {
		return time.Time{}, false
	}
	v, ok := influxql.Num(s[0].Values[0][0])
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(int64(v), 0).UTC(), true
}

func from(rp, m string) string {
	if rp == "" {
		return `"` + m + `"`
	}
	return `"` + rp + `"."` + m + `"`
}

// rollRange rolls [a, b) up into l and writes the points.
func (j *Job) rollRange(ctx context.Context, l Level, a, b time.Time) (int, error) {
	tf := fmt.Sprintf("time >= %dms AND time < %dms", a.UnixMilli(), b.UnixMilli())
	enc := sink.NewEncoder()
	var buf []byte
	n := 0
	for _, m := range Measurements {
		var lens map[string]time.Duration // read when a row needs it
		for _, spec := range rollups[m] {
			src := from("", m)
			if spec.inner != "" {
				src = fmt.Sprintf(`(SELECT %s FROM %s WHERE %s GROUP BY *)`, spec.inner, src, tf)
			}
			q := fmt.Sprintf(`SELECT %s FROM %s WHERE %s%s GROUP BY time(%ds), * fill(none)`,
				spec.selectList(), src, tf, spec.where, int(l.Every.Seconds()))
			series, err := j.Q.Query(ctx, q)
			if err != nil {
				return 0, err
			}
			for _, s := range series {
				for _, row := range s.Rows() {
					if lens == nil && needsLength(row) {
						if lens, err = report.WindowLengths(ctx, j.Q, m, tf); err != nil {
							return 0, err
						}
					}
					fields := spec.fields(row, lens[s.Tags[schema.TagHost]], gpuCount(m, s.Tags))
					if len(fields) == 0 {
						continue
					}
					t, _ := influxql.Num(row["time"])
					p := write.NewPoint(m+l.Suffix, s.Tags, fields, time.Unix(int64(t), 0))
					if buf, err = enc.AppendWrite(buf, p); err != nil {
						return 0, err
					}
					n++
				}
			}
		}
	}
	buf, nc, err := j.rollCurve(ctx, l, a, b, enc, buf)
	if err != nil {
		return 0, err
	}
	n += nc
	if len(buf) == 0 {
		return 0, nil
	}
	if err := l.Out.Write(ctx, buf); err != nil {
		return 0, err
	}
	if j.Log != nil {
		j.Log("rollup %s: %s – %s: %d points", l.Suffix, a.Format(time.RFC3339), b.Format(time.RFC3339), n)
	}
	return n, nil
}

// agg is one aggregate of a raw field (or of an inner query's column);
// expr, where set, is the select expression instead.
type agg struct{ fn, field, as, expr string }

// spec is one query of a rollup: aggregates of a measurement's windows,
// optionally of one state, and the names its fields take.
type spec struct {
	aggs  []agg
	where string
	// group names the time fields (schema.RollupField): "idle" gives
	// idle_windows, idle_seconds and idle_gpu_seconds; "" the plain
	// windows, seconds and gpu_seconds.
	group string
	// inner, where set, is a select list over the raw windows that the
	// aggregates read instead of the raw fields; such a spec writes no
	// time fields of its own.
	inner string
	// perGPU names fields to write again times the point's GPUs: the
	// field's name -> the GPU-seconds' name.
	perGPU map[string]string
	// aggsOnly: the spec writes its aggregates alone, no time fields, and
	// only where one of them is not 0 (a period without latency writes
	// none of the latency's).
	aggsOnly bool
}

// field is the name time field f takes in s.
func (s spec) field(f string) string {
	if s.group == "" {
		return f
	}
	return schema.RollupField(s.group, f)
}

func (s spec) selectList() string {
	var b strings.Builder
	var sel []string
	for _, a := range s.aggs {
		if a.expr != "" {
			sel = append(sel, fmt.Sprintf(`%s AS "%s"`, a.expr, a.as))
			continue
		}
		sel = append(sel, fmt.Sprintf(`%s("%s") AS "%s"`, a.fn, a.field, a.as))
	}
	if s.inner != "" || s.aggsOnly {
		return strings.Join(sel, ", ")
	}
	for _, x := range sel {
		b.WriteString(x + ", ")
	}
	// Time observed: window_s where the point carries it, and the count of
	// those that do not, which the window length derived from the data
	// turns into seconds.
	fmt.Fprintf(&b, `count(%q) AS "n", sum(%q) AS "ws", count(%q) AS "wn"`, schema.FieldCoverage, schema.FieldWindowS, schema.FieldWindowS)
	return b.String()
}

func needsLength(row map[string]any) bool {
	n, _ := influxql.Num(row["n"])
	wn, _ := influxql.Num(row["wn"])
	return wn < n
}

// gpuCount is how many GPUs a server point stands for (its gpus tag); a
// GPU point stands for one.
func gpuCount(m string, tags map[string]string) int {
	if m == schema.GPU {
		return 1
	}
	if tags[schema.TagGPUs] == "" {
		return 0
	}
	return len(strings.Split(tags[schema.TagGPUs], ","))
}

// fields turns a result row into the rollup's fields: the aggregates, and
// the windows, their seconds and GPU-seconds (seconds times the GPUs the
// point stands for). derived is the host's window length read from the
// data, for points without window_s.
func (s spec) fields(row map[string]any, derived time.Duration, gpus int) map[string]any {
	out := map[string]any{}
	for _, a := range s.aggs {
		if v, ok := influxql.Num(row[a.as]); ok {
			out[a.as] = v
		}
	}
	for f, gf := range s.perGPU {
		if v, ok := out[f].(float64); ok {
			out[gf] = v * float64(gpus)
		}
	}
	if s.aggsOnly {
		for _, v := range out {
			if v != 0.0 {
				return out
			}
		}
		return nil
	}
	if s.inner != "" {
		if n, ok := out[s.aggs[0].as].(float64); ok {
			out[s.aggs[0].as] = int64(n)
			return out
		}
		return nil // no window of the period had a ceiling
	}
	n, _ := influxql.Num(row["n"])
	if n == 0 {
		return out
	}
	out[s.field(schema.FieldWindows)] = int64(n)
	ws, _ := influxql.Num(row["ws"])
	wn, _ := influxql.Num(row["wn"])
	if wn < n && derived <= 0 {
		// No length is known for these windows: leave the seconds out
		// rather than guess.
		return out
	}
	secs := ws + (n-wn)*derived.Seconds()
	out[s.field(schema.FieldSeconds)] = secs
	out[s.field(schema.FieldGPUSeconds)] = secs * float64(gpus)
	return out
}

// Measurements are the raw measurements rolled up.
var Measurements = []string{schema.Server, schema.GPU}

// States are the server verdicts the state rollup counts.
var States = schema.States

// same aggregates a raw field into a rollup field of the same name.
func same(fn, field string) agg { return agg{fn, field, field, ""} }

var rollups = map[string][]spec{
	schema.Server: append([]spec{{aggs: []agg{
		same("sum", schema.FieldTokens), same("sum", schema.FieldPromptTokens), same("sum", schema.FieldEnergyJ),
		same("mean", schema.FieldSystemTPS), same("mean", schema.FieldPerUserTPS),
		same("mean", schema.FieldRunning), {"max", schema.FieldRunning, schema.FieldRunningMax, ""}, same("mean", schema.FieldWaiting),
		same("mean", schema.FieldKVCacheUsage), same("mean", schema.FieldGPUUtil), same("mean", schema.FieldSMActive),
		same("mean", schema.FieldPowerW), same("mean", schema.FieldTPSPerGPU),
		// The prompt's split, summed: cached ÷ all of a period is its
		// token-weighted hit rate.
		same("sum", schema.FieldPromptComputedTokens), same("sum", schema.FieldPromptCachedTokens),
		same("sum", schema.FieldPromptExternalTokens),
	}}, ceilingSpec, latencySpec, attainmentSpec}, append(stateSpecs(), suspectSpecs()...)...),
	schema.GPU: {{aggs: []agg{
		same("mean", schema.FieldUtil), same("max", schema.FieldUtilMax), same("mean", schema.FieldSMActive),
		same("mean", schema.FieldMemUtil), same("max", schema.FieldMemUsedBytes), same("max", schema.FieldMemTotalBytes),
		same("mean", schema.FieldPowerW), same("sum", schema.FieldEnergyJ), same("max", schema.FieldTempC),
		same("mean", schema.FieldSMClockMHz),
	}}, {where: fmt.Sprintf(` AND %q < %d`, schema.FieldUtil, schema.IdleGPUUtil), group: schema.IdleGPU}},
}

// suspectSpecs count the windows each sanity rule doubted (the suspect
// field names it) into the server rollup: suspect_gpu_idle_windows,
// suspect_gpu_idle_seconds, ... No rule's name is part of another's.
func suspectSpecs() []spec {
	var out []spec
	for _, r := range analysis.Rules {
		out = append(out, spec{where: fmt.Sprintf(` AND %q =~ /%s/`, schema.FieldSuspect, r), group: schema.RollupField(schema.FieldSuspect, r)})
	}
	return out
}

// ceilingSpec rolls the decode ceiling up from report.CeilingTerms: mbu
// and ceiling_tps as means weighted by window length over the windows
// that carry them (with the weights, so that longer periods and the
// report combine them exactly), and the lost throughput's sums. Its first
// aggregate, the windows with a ceiling, gates the point: a period
// without one writes none of these fields.
var ceilingSpec = spec{inner: report.CeilingTerms, perGPU: map[string]string{schema.FieldLostSeconds: schema.FieldLostGPUSeconds}, aggs: []agg{
	same("sum", schema.FieldCeilingWindows),
	same("sum", schema.FieldLostTokens), same("sum", schema.FieldAboveCeilingTokens), same("sum", schema.FieldLostSeconds),
	same("sum", schema.FieldCeilingSeconds), same("sum", schema.FieldMBUSeconds),
	{as: schema.FieldCeilingTPS, expr: fmt.Sprintf(`sum(%q) / sum(%q)`, report.ColCeilingTokens, schema.FieldCeilingSeconds)},
	{as: schema.FieldMBU, expr: fmt.Sprintf(`sum(%q) / sum(%q)`, report.ColMBUWeighted, schema.FieldMBUSeconds)},
}}

// latencySpec writes the latency's aggregates of each period's windows
// (schema.LatencyRollup), which the report reads for rolled-up hours of a
// raw range charted in hourly buckets.
var latencySpec = func() spec {
	s := spec{aggsOnly: true}
	for _, a := range schema.LatencyRollup {
		s.aggs = append(s.aggs, agg{a.Fn, a.Field, a.As, ""})
	}
	return s
}()

// attainmentSpec sums report.AttainmentTerms per period: the requests
// that met the objectives, weighted as the report weighs them.
var attainmentSpec = func() spec {
	s := spec{inner: report.AttainmentTerms, aggsOnly: true}
	for _, c := range report.AttainmentCols {
		s.aggs = append(s.aggs, same("sum", c))
	}
	return s
}()

// stateSpecs count each state's windows and seconds into the server
// rollup: idle_windows, idle_seconds, idle_gpu_seconds, ...
func stateSpecs() []spec {
	var out []spec
	for _, st := range States {
		out = append(out, spec{where: fmt.Sprintf(` AND %q = '%s'`, schema.FieldState, st), group: st})
	}
	return out
}
