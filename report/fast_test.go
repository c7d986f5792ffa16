package report_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/rollup"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/fleetsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// roundOff is how far a number of the fast path may lie from the one
// level's: the totals are summed per period and then across periods
// instead of per window, and a GPU's mean utilization is the parts'
// means weighted by their windows; float64 sums of a few thousand terms
// that differ only in their order agree to about 1e-12.
const roundOff = 1e-9

// recorder keeps the text of every query it runs.
type recorder struct {
	c  *report.Client
	mu sync.Mutex
	qs []string
}

func (r *recorder) Query(ctx context.Context, q string) ([]influxql.Series, error) {
	r.note(q)
	return r.c.Query(ctx, q)
}

// Open lets the report read the answers as they stream, as it reads
// the Client's.
func (r *recorder) Open(ctx context.Context, q string) (*report.Answer, error) {
	r.note(q)
	return r.c.Open(ctx, q)
}

func (r *recorder) note(q string) {
	r.mu.Lock()
	r.qs = append(r.qs, q)
	r.mu.Unlock()
}

// read counts the queries of what, but for the look-ups of the newest
// rollup (last()).
func (r *recorder) read(what string) int {
	n := 0
	for _, q := range r.qs {
		if strings.Contains(q, what) && !strings.Contains(q, "last(") {
			n++
		}
	}
	return n
}

// TestFastPathEqualsOneLevel builds reports of a simulated fleet whose
// raw windows were rolled up by package rollup, once reading the totals'
// whole hours (or days) from the rollups and once from the level's own
// series alone, and requires the same JSON up to roundOff.
func TestFastPathEqualsOneLevel(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "fast")
	for _, rp := range []string{"tpsmon_1h", "tpsmon_1d"} {
		influxtest.Query(t, base, db, fmt.Sprintf(`CREATE RETENTION POLICY "%s" ON "%s" DURATION 0s REPLICATION 1`, rp, db))
	}
	// 3 hosts of 4 GPUs, 2 unused on host 0; 2-minute windows.
	fleet := fleetsim.Fleet{Hosts: 3, GPUs: 4, Unused: 2, Model: "H100"}
	day := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	end := day.Add(54 * time.Hour)
	writeRaw(t, base, db, func(e func(*write.Point) error) error { return fleet.Raw(day, end, 2*time.Minute, e) })
	// The rollup job last ran at 03:10 of the third day: its last three
	// hours are not rolled up, nor the third day.
	rolledAt := day.Add(51*time.Hour + 10*time.Minute)
	if _, err := rollupJob(t, base, db).Run(context.Background(), rolledAt); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		f       report.Filter
		coarser string // the rollup the fast path must read
		// fastReads and slowReads are how many queries read it: each
		// total of the fast path's (lost, GPU time, idle, server totals,
		// every state's time in one), and the curve's of both paths at
		// the hourly level (it reads whole days of cells from the daily
		// rollup).
		fastReads, slowReads int
	}{
		// Raw level, ragged ends: raw 05:20-06:00, hourly 06:00-07:00
		// of the next day, raw to 07:40; the 5 totals, and the curve's
		// cells with their sketches (and the first hour that has them).
		{"raw, ragged ends", report.Filter{From: day.Add(5*time.Hour + 20*time.Minute), To: day.Add(31*time.Hour + 40*time.Minute), Interval: 10 * time.Minute, Level: report.Raw},
			`"tpsmon_1h".`, 7, 0},
		// Raw level, past the rollups: hourly to 03:00 of the third day,
		// raw windows after.
		{"raw, not yet rolled up", report.Filter{From: day.Add(30 * time.Hour), To: end, Interval: 10 * time.Minute, Level: report.Raw},
			`"tpsmon_1h".`, 7, 0},
		// The same two at hourly buckets (what Plan gives a day or more
		// of raw windows): the fleet's sums per bucket come from the
		// same parts, 4 reads more (GPU time, every state's time in one,
		// unused GPUs, tokens), and so do the servers' series and their
		// latency (its buckets, their attainment, the first hour with
		// them): 6 more. They must equal the raw windows' buckets and each
		// state's own query over them.
		{"raw hourly buckets, ragged ends", report.Filter{From: day.Add(5*time.Hour + 20*time.Minute), To: day.Add(31*time.Hour + 40*time.Minute), Interval: time.Hour, Level: report.Raw},
			`"tpsmon_1h".`, 15, 0},
		{"raw hourly buckets, not yet rolled up", report.Filter{From: day.Add(30 * time.Hour), To: end, Interval: time.Hour, Level: report.Raw},
			`"tpsmon_1h".`, 15, 0},
		// Hourly level: hourly 03:00-24:00, the second day daily, hourly
		// 00:00-03:00 of the third.
		{"hourly, whole day inside", report.Filter{From: day.Add(3 * time.Hour), To: day.Add(51 * time.Hour), Interval: 6 * time.Hour, Level: report.Hourly},
			`"tpsmon_1d".`, 6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := func(o report.Options) (*report.Report, *recorder) {
				t.Helper()
				rec := &recorder{c: report.NewClient(base, db, "", 30*time.Second)}
				var tr report.Trace
				r, err := report.Build(report.WithTrace(context.Background(), &tr), rec, tc.f, o)
				if err != nil {
					t.Fatal(err)
				}
				// Every query opened (ahead) was read by its step: none
				// ran in InfluxDB for nothing.
				if len(tr.Queries) != len(rec.qs) {
					t.Errorf("%d queries opened, %d read", len(rec.qs), len(tr.Queries))
				}
				return r, rec
			}
			fast, fq := build(report.Options{Prices: map[string]float64{"*": 2}})
			slow, sq := build(report.Options{Prices: map[string]float64{"*": 2}, OneLevel: true})
			// Every query opened ahead is the one its step reads: none
			// runs twice (a step that renders its query otherwise opens
			// it again, and InfluxDB runs both).
			seen := map[string]bool{}
			for _, q := range fq.qs {
				if seen[q] {
					t.Errorf("the fast path ran %s twice", q)
				}
				seen[q] = true
			}
			if n := fq.read(tc.coarser); n != tc.fastReads {
				t.Errorf("the fast path read %s %d times, want %d", tc.coarser, n, tc.fastReads)
			}
			if n := sq.read(tc.coarser); n != tc.slowReads {
				t.Errorf("the one-level report read %s %d times, want %d", tc.coarser, n, tc.slowReads)
			}
			if fast.GPUHours == 0 || len(fast.Servers) != 3 || len(fast.Lost) == 0 || fast.LostTokens == nil || fast.TokensPerJoule == nil {
				t.Fatalf("the report is too empty to compare: %v GPU-hours, %d servers, %d lost", fast.GPUHours, len(fast.Servers), len(fast.Lost))
			}
			for _, s := range fast.Servers {
				if tc.f.Level == report.Raw && (s.Latency == nil || len(s.Latency.Series) < 2) || len(s.OperatingCurve) == 0 || len(s.OperatingCurve[0].Bins) < 3 {
					t.Fatalf("server %s: too little latency or curve to compare: %+v, %d curves", s.Host, s.Latency, len(s.OperatingCurve))
				}
				if tc.f.Level == report.Raw && s.OperatingCurve[0].Exactness != curve.SketchExactness {
					t.Errorf("server %s: the curve of a raw range's rolled-up hours is %q", s.Host, s.OperatingCurve[0].Exactness)
				}
			}
			// The fleet's buckets must hold more than one state, and
			// their GPU-hours must be there, for their sums to be tested.
			states := map[string]bool{}
			for _, p := range fast.Fleet {
				if p.GPUHours == 0 {
					t.Fatalf("fleet bucket %v has no GPU-hours", p.Time)
				}
				for st := range p.StateGPUHours {
					states[st] = true
				}
			}
			if len(fast.Fleet) < 2 || len(states) < 3 {
				t.Fatalf("%d fleet buckets in %d states: too few to compare", len(fast.Fleet), len(states))
			}
			a, _ := json.Marshal(fast)
			b, _ := json.Marshal(slow)
			var x, y any
			if err := json.Unmarshal(a, &x); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &y); err != nil {
				t.Fatal(err)
			}
			var diffs []string
			compare("", x, y, &diffs)
			if len(diffs) > 0 {
				if len(diffs) > 20 {
					diffs = append(diffs[:20], fmt.Sprintf("... %d more", len(diffs)-20))
				}
				t.Errorf("the fast path differs from the one-level report:\n%s", strings.Join(diffs, "\n"))
			}
		})
	}
}

// rolledUpDay writes 26 hours of a small simulated fleet's 2-minute
// windows into a new database (name) and rolls them up, as the job would
// 10 minutes after: a client of it, and the day the windows start.
func rolledUpDay(t *testing.T, name string) (*report.Client, time.Time) {
	t.Helper()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, name)
	for _, rp := range []string{"tpsmon_1h", "tpsmon_1d"} {
		influxtest.Query(t, base, db, fmt.Sprintf(`CREATE RETENTION POLICY "%s" ON "%s" DURATION 0s REPLICATION 1`, rp, db))
	}
	fleet := fleetsim.Fleet{Hosts: 3, GPUs: 4, Unused: 2, Model: "H100"}
	day := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	writeRaw(t, base, db, func(e func(*write.Point) error) error { return fleet.Raw(day, day.Add(26*time.Hour), 2*time.Minute, e) })
	if _, err := rollupJob(t, base, db).Run(context.Background(), day.Add(26*time.Hour+10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	return report.NewClient(base, db, "", 30*time.Second), day
}

// TestStatesInOneQuery: on rollups, the one query of every state's
// fields gives each state's time as its own query does, exactly.
func TestStatesInOneQuery(t *testing.T) {
	t.Parallel()
	c, day := rolledUpDay(t, "states")
	for _, f := range []report.Filter{
		{From: day, To: day.Add(26 * time.Hour), Interval: 2 * time.Hour, Level: report.Hourly},
		{From: day, To: day.Add(48 * time.Hour), Interval: 24 * time.Hour, Level: report.Daily},
	} {
		for _, qs := range [][2]report.Query{{report.StateTime, report.StateTimeAll}, {report.StateTrend, report.StateTrendAll}} {
			// each state's own query: state|tags|time -> windows, seconds
			own := map[string]string{}
			for _, st := range report.States {
				for k, v := range stateCells(t, c, f, qs[0], st, func(col string) string { return col }) {
					own[st+"|"+k] = v
				}
			}
			all := map[string]string{}
			for _, st := range report.States {
				for k, v := range stateCells(t, c, f, qs[1], "", func(col string) string { return schema.RollupField(st, col) }) {
					all[st+"|"+k] = v
				}
			}
			if len(own) == 0 {
				t.Fatalf("%s at %s: no rows", qs[0].Name, f.Level)
			}
			if len(own) != len(all) {
				t.Errorf("%s at %s: %d rows of the states' own queries, %d of the one", qs[0].Name, f.Level, len(own), len(all))
			}
			for k, v := range own {
				if all[k] != v {
					t.Errorf("%s at %s, %s: %s, in one query %q", qs[0].Name, f.Level, k, v, all[k])
				}
			}
		}
	}
}

// TestLostTableIsLostThroughput: the dashboard's lost-throughput tables
// (four columns) give what the report's query does, per server and GPU
// set, from raw windows and from each rollup.
func TestLostTableIsLostThroughput(t *testing.T) {
	t.Parallel()
	c, day := rolledUpDay(t, "losttable")
	cols := []string{schema.FieldLostTokens, schema.FieldLostSeconds, schema.FieldCeilingWindows, schema.FieldWindows}
	cells := func(f report.Filter, q report.Query) map[string]float64 {
		t.Helper()
		text, err := f.Render(q, "")
		if err != nil {
			t.Fatal(err)
		}
		series, err := c.Query(context.Background(), text)
		if err != nil {
			t.Fatalf("%v\n%s", err, text)
		}
		out := map[string]float64{}
		for _, s := range series {
			for _, row := range s.Rows() {
				for _, col := range cols {
					if v, ok := influxql.Num(row[col]); ok {
						out[fmt.Sprint(s.Tags, " ", col)] = v
					}
				}
			}
		}
		return out
	}
	for _, f := range []report.Filter{
		{From: day.Add(time.Hour), To: day.Add(25 * time.Hour), Level: report.Raw},
		{From: day, To: day.Add(26 * time.Hour), Level: report.Hourly},
		{From: day, To: day.Add(48 * time.Hour), Level: report.Daily},
	} {
		want, got := cells(f, report.LostThroughput), cells(f, report.LostTable)
		lost, without := 0, 0
		for k, v := range want {
			if strings.HasSuffix(k, " "+schema.FieldLostTokens) && v > 0 {
				lost++
			}
			if strings.HasSuffix(k, " "+schema.FieldWindows) {
				if v > want[strings.TrimSuffix(k, schema.FieldWindows)+schema.FieldCeilingWindows] {
					without++
				}
			}
		}
		if lost == 0 || without == 0 {
			t.Fatalf("%s: %d servers lost throughput, %d had windows without a ceiling: too few to compare", f.Level, lost, without)
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d cells, the report's query %d", f.Level, len(got), len(want))
		}
		for k, v := range want {
			if g, ok := got[k]; !ok || math.Abs(g-v) > roundOff*math.Max(1, math.Abs(v)) {
				t.Errorf("%s, %s: %v, the report's query %v", f.Level, k, g, v)
			}
		}
	}
}

// stateCells runs q and keys each row with a window by its tags and
// time: its windows and seconds as text, read from the columns col names
// (a state's own query names them windows and seconds).
func stateCells(t *testing.T, c *report.Client, f report.Filter, q report.Query, state string, col func(string) string) map[string]string {
	t.Helper()
	text, err := f.Render(q, state)
	if err != nil {
		t.Fatal(err)
	}
	series, err := c.Query(context.Background(), text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	out := map[string]string{}
	for _, s := range series {
		for _, row := range s.Rows() {
			w, sec := row[col(schema.FieldWindows)], row[col(schema.FieldSeconds)]
			if w == nil && sec == nil {
				continue
			}
			out[fmt.Sprint(s.Tags, row["time"])] = fmt.Sprint(w, " ", sec)
		}
	}
	return out
}

// compare lists where two decoded JSON values differ: numbers by more
// than roundOff (relative), anything else at all.
func compare(path string, a, b any, out *[]string) {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, a, b))
			return
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok {
				*out = append(*out, fmt.Sprintf("%s.%s: only in the fast path (%v)", path, k, v))
				continue
			}
			compare(path+"."+k, v, w, out)
		}
		for k, w := range y {
			if _, ok := x[k]; !ok {
				*out = append(*out, fmt.Sprintf("%s.%s: only in the one-level report (%v)", path, k, w))
			}
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			*out = append(*out, fmt.Sprintf("%s: %d items vs %v", path, len(x), b))
			return
		}
		for i := range x {
			compare(fmt.Sprintf("%s[%d]", path, i), x[i], y[i], out)
		}
	case float64:
		y, ok := b.(float64)
		if !ok || math.Abs(x-y) > tolerance(path)*math.Max(1, math.Max(math.Abs(x), math.Abs(y))) {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, a, b))
		}
	default:
		switch {
		case strings.HasSuffix(path, ".operating_point.note"):
			// Its numbers are the fields beside it, compared as numbers.
		case strings.HasSuffix(path, ".exactness") && a == curve.SketchExactness && b == "exact":
			// The rolled-up hours' quantiles, from their sketches.
		case a != b:
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, a, b))
		}
	}
}

// tolerance is how far a number of the fast path may lie from the one
// level's, relative: roundOff, but on the operating curve read from
// hourly cells and sketches where the one level reads every window: a
// quantile (and the operating point's rates, and a headroom, a ratio of
// two) within the sketches' accuracy, and the means and sums to the
// cells' seven digits.
func tolerance(path string) float64 {
	if !strings.Contains(path, ".operating_curve[") || strings.Contains(path, ".frontier[") {
		return roundOff
	}
	for _, q := range []string{".p10", ".median", ".p90", ".median_system_tps", ".operating_point.system_tps", ".operating_point.per_user_tps"} {
		if strings.HasSuffix(path, q) {
			return curve.SketchAccuracy
		}
	}
	if strings.HasSuffix(path, ".headroom") {
		return 2 * curve.SketchAccuracy
	}
	return 1e-6
}

func writeRaw(t *testing.T, base, bucket string, gen func(func(*write.Point) error) error) {
	t.Helper()
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: bucket, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	if err := gen(func(p *write.Point) error {
		buf, err = enc.AppendWrite(buf, p)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := in.Write(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
}

func rollupJob(t *testing.T, base, db string) *rollup.Job {
	t.Helper()
	level := func(every time.Duration, lv string) rollup.Level {
		out, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db + "/tpsmon_" + lv, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(out.Close)
		return rollup.Level{Every: every, Suffix: "_" + lv, RP: "tpsmon_" + lv, Out: out}
	}
	return &rollup.Job{Q: report.NewClient(base, db, "", time.Minute), Levels: []rollup.Level{level(time.Hour, "1h"), level(24*time.Hour, "1d")},
		Delay: 5 * time.Minute, Chunk: 24}
}
