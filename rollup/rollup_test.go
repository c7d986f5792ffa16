package rollup

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

var day0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// want accumulates what the rollups must say, per series and period.
type want struct {
	tokens  map[string]float64 // server|period
	secs    map[string]float64 // server|state|period
	gpuSecs map[string]float64 // uuid|period
	// prompt sums the split's fields (server|field|period); suspect the
	// seconds each rule doubted (server|rule|period).
	prompt, suspect map[string]float64
}

func (w want) add(key string, m map[string]float64, v float64) { m[key] += v }

// writeDays writes 1-minute windows for days [from, to): node-a's points
// carry window_s, node-old's do not (written before the field existed).
//   - node-a/llama on GPUs 0,1: idle in hours divisible by 3, ok otherwise
//     at 100 tokens/s; GPU 2 of node-a serves nobody;
//   - node-old/qwen on GPU 0: saturated in even hours, ok in odd ones, at
//     200 tokens/s.
func writeDays(t *testing.T, base, db string, from, to int, w want) {
	t.Helper()
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	add := func(p *write.Point) {
		if buf, err = enc.AppendWrite(buf, p); err != nil {
			t.Fatal(err)
		}
	}
	for ts := day0.Add(time.Duration(from) * 24 * time.Hour); ts.Before(day0.Add(time.Duration(to) * 24 * time.Hour)); ts = ts.Add(time.Minute) {
		h, d := "1h|"+fmt.Sprint(ts.Truncate(time.Hour).Unix()), "1d|"+fmt.Sprint(ts.Truncate(24*time.Hour).Unix())
		state, tokens := schema.StateOK, int64(6000)
		if ts.Hour()%3 == 0 {
			state, tokens = schema.StateIdle, 0
		}
		fields := map[string]any{schema.FieldTokens: tokens, schema.FieldSystemTPS: float64(tokens) / 60, schema.FieldState: state, schema.FieldCoverage: 1.0, schema.FieldEnergyJ: 36000.0, schema.FieldWindowS: 60.0}
		// llama's ok windows split their prompt; some hours are suspect.
		split := map[string]int64{}
		if state == schema.StateOK {
			split = map[string]int64{schema.FieldPromptComputedTokens: 500, schema.FieldPromptCachedTokens: 1500}
			for k, v := range split {
				fields[k] = v
			}
		}
		var rules []string
		switch {
		case ts.Hour()%8 == 5:
			rules = []string{"activity_zero", "gpu_idle"}
		case ts.Hour()%4 == 1:
			rules = []string{"gpu_idle"}
		}
		if rules != nil {
			fields[schema.FieldSuspect] = strings.Join(rules, ",")
		}
		add(write.NewPoint(schema.Server, map[string]string{schema.TagHost: "node-a", schema.TagServer: "llama", schema.TagGPUs: "0,1"}, fields, ts))
		for _, p := range []string{h, d} {
			w.add(fmt.Sprint("llama|", p), w.tokens, float64(tokens))
			w.add(fmt.Sprint("llama|", state, "|", p), w.secs, 60)
			for k, v := range split {
				w.add(fmt.Sprint("llama|", k, "|", p), w.prompt, float64(v))
			}
			for _, r := range rules {
				w.add(fmt.Sprint("llama|", r, "|", p), w.suspect, 60)
			}
		}
		qstate := schema.StateOK
		if ts.Hour()%2 == 0 {
			qstate = schema.StateSaturated
		}
		add(write.NewPoint(schema.Server, map[string]string{schema.TagHost: "node-old", schema.TagServer: "qwen", schema.TagGPUs: "0"},
			map[string]any{schema.FieldTokens: int64(12000), schema.FieldSystemTPS: 200.0, schema.FieldState: qstate, schema.FieldCoverage: 1.0, schema.FieldEnergyJ: 18000.0}, ts))
		for _, p := range []string{h, d} {
			w.add(fmt.Sprint("qwen|", p), w.tokens, 12000)
			w.add(fmt.Sprint("qwen|", qstate, "|", p), w.secs, 60)
		}
		for _, g := range []struct{ host, gpu, server string }{{"node-a", "0", "llama"}, {"node-a", "1", "llama"}, {"node-a", "2", ""}, {"node-old", "0", "qwen"}} {
			f := map[string]any{schema.FieldUtil: 50.0, schema.FieldUtilMax: 60.0, schema.FieldEnergyJ: 18000.0, schema.FieldCoverage: 1.0}
			if g.host == "node-a" {
				f[schema.FieldWindowS] = 60.0
			}
			if g.server == "" {
				f[schema.FieldUtil] = 1.0
			}
			uuid := "GPU-" + g.host + "-" + g.gpu
			add(write.NewPoint(schema.GPU, map[string]string{schema.TagHost: g.host, schema.TagGPU: g.gpu, schema.TagUUID: uuid, schema.TagServer: g.server}, f, ts))
			for _, p := range []string{h, d} {
				w.add(fmt.Sprint(uuid, "|", p), w.gpuSecs, 60)
			}
		}
	}
	if err := in.Write(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
}

func setup(t *testing.T) (string, string) {
	t.Helper()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "rollup")
	f, err := os.Open(filepath.Join("..", "packaging", "influxdb", "retention.influxql"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		if stmt := strings.TrimSpace(sc.Text()); stmt != "" && !strings.HasPrefix(stmt, "--") {
			influxtest.Query(t, base, db, strings.ReplaceAll(stmt, `ON "tpsmon"`, `ON "`+db+`"`))
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d statements in retention.influxql", n)
	}
	return base, db
}

func job(t *testing.T, base, db string) *Job {
	t.Helper()
	level := func(every time.Duration, lv string) Level {
		out, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db + "/tpsmon_" + lv, Timeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(out.Close)
		return Level{Every: every, Suffix: "_" + lv, RP: "tpsmon_" + lv, Out: out, Recheck: 3}
	}
	return &Job{Q: report.NewClient(base, db, "", 30*time.Second), Levels: []Level{level(time.Hour, "1h"), level(24*time.Hour, "1d")},
		Delay: 5 * time.Minute, Chunk: 24, Log: t.Logf}
}

// check compares every rollup point of [from, to) with what was written.
func check(t *testing.T, base, db string, w want, lv string, every time.Duration, from, to time.Time, extra int) {
	t.Helper()
	periods := 0
	for _, s := range influxtest.Query(t, base, db, fmt.Sprintf(`SELECT * FROM "tpsmon_%s"."tpsmon_server_%s" WHERE time >= %dms AND time < %dms GROUP BY "server"`,
		lv, lv, from.UnixMilli(), to.UnixMilli())) {
		srv := s.Tags[schema.TagServer]
		for _, row := range s.Rows() {
			p := lv + "|" + fmt.Sprint(int64(num(row["time"])))
			periods++
			if got, want := num(row[schema.FieldTokens]), w.tokens[fmt.Sprint(srv, "|", p)]; got != want {
				t.Errorf("%s %s at %s: tokens %v, raw %v", lv, srv, p, got, want)
			}
			ngpu := map[string]float64{"llama": 2, "qwen": 1, "late": 1}[srv]
			for _, f := range []string{schema.FieldPromptComputedTokens, schema.FieldPromptCachedTokens} {
				if got, want := num0(row[f]), w.prompt[fmt.Sprint(srv, "|", f, "|", p)]; got != want {
					t.Errorf("%s %s at %s: %s %v, raw %v", lv, srv, p, f, got, want)
				}
			}
			for _, r := range analysis.Rules {
				f := schema.RollupField(schema.RollupField(schema.FieldSuspect, r), schema.FieldSeconds)
				if got, want := num0(row[f]), w.suspect[fmt.Sprint(srv, "|", r, "|", p)]; got != want {
					t.Errorf("%s %s at %s: %s %v, raw %v", lv, srv, p, f, got, want)
				}
			}
			for _, st := range schema.States {
				want := w.secs[fmt.Sprint(srv, "|", st, "|", p)]
				if got := num0(row[st+"_seconds"]); got != want || num0(row[st+"_gpu_seconds"]) != want*ngpu {
					t.Errorf("%s %s at %s: %s %v s (%v GPU-s), raw %v s", lv, srv, p, st, got, num0(row[st+"_gpu_seconds"]), want)
				}
			}
		}
	}
	if n := int(to.Sub(from)/every)*2 + extra; periods != n {
		t.Errorf("%s: %d server rollup points in %s – %s, want %d", lv, periods, from, to, n)
	}
	for _, s := range influxtest.Query(t, base, db, fmt.Sprintf(`SELECT "seconds", "windows" FROM "tpsmon_%s"."tpsmon_gpu_%s" WHERE time >= %dms AND time < %dms GROUP BY "uuid"`,
		lv, lv, from.UnixMilli(), to.UnixMilli())) {
		for _, row := range s.Rows() {
			p := lv + "|" + fmt.Sprint(int64(num(row["time"])))
			if got, want := num(row[schema.FieldSeconds]), w.gpuSecs[fmt.Sprint(s.Tags[schema.TagUUID], "|", p)]; got != want || num(row[schema.FieldWindows]) != want/60 {
				t.Errorf("%s %s at %s: %v s over %v windows, raw %v s", lv, s.Tags[schema.TagUUID], p, got, num(row[schema.FieldWindows]), want)
			}
		}
	}
}

func num0(v any) float64 {
	f, _ := influxql.Num(v)
	return f
}

func num(v any) float64 {
	f, ok := influxql.Num(v)
	if !ok {
		return math.NaN()
	}
	return f
}

// TestRollupEqualsRawAfterDowntime: a first run rolls up day 1; the job is
// then down for two days while windows keep arriving (and one arrives late
// for an hour already rolled up); the next run catches up, and every hourly
// and daily point equals the raw windows it summarises. A third run changes
// nothing.
func TestRollupEqualsRawAfterDowntime(t *testing.T) {
	base, db := setup(t)
	w := want{tokens: map[string]float64{}, secs: map[string]float64{}, gpuSecs: map[string]float64{},
		prompt: map[string]float64{}, suspect: map[string]float64{}}
	writeDays(t, base, db, 0, 2, w)
	j := job(t, base, db)
	ctx := context.Background()
	res, err := j.Run(ctx, day0.Add(25*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].To.Equal(day0.Add(24*time.Hour)) || !res[1].To.Equal(day0.Add(24*time.Hour)) {
		t.Fatalf("first run: %+v, want hours and the day up to day 1", res)
	}
	check(t, base, db, w, "1h", time.Hour, day0, day0.Add(24*time.Hour), 0)
	check(t, base, db, w, "1d", 24*time.Hour, day0, day0.Add(24*time.Hour), 0)

	// Downtime: day 3 arrives, and a window of qwen for 23:30 on day 1
	// is delivered late (its daemon's spool drained after an outage) -
	// here an extra server on node-old.
	writeDays(t, base, db, 2, 3, w)
	in, _ := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db, Timeout: 10 * time.Second})
	defer in.Close()
	late := day0.Add(23*time.Hour + 30*time.Minute)
	if err := in.Write(ctx, fmt.Appendf(nil, "tpsmon_server,gpus=1,host=node-old,server=late coverage=1,state=\"ok\",tokens=777i %d", late.UnixMilli())); err != nil {
		t.Fatal(err)
	}
	res, err = j.Run(ctx, day0.Add(72*time.Hour+10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].From.Equal(day0.Add(20*time.Hour)) || !res[0].To.Equal(day0.Add(72*time.Hour)) {
		t.Errorf("catch-up run: %+v, want hours from 20:00 on day 1 (3 rechecked) to day 3's end", res[0])
	}
	w.tokens[fmt.Sprint("late|1h|", day0.Add(23*time.Hour).Unix())] = 777
	w.secs[fmt.Sprint("late|ok|1h|", day0.Add(23*time.Hour).Unix())] = 60
	w.tokens[fmt.Sprint("late|1d|", day0.Unix())] = 777
	w.secs[fmt.Sprint("late|ok|1d|", day0.Unix())] = 60
	check(t, base, db, w, "1h", time.Hour, day0, day0.Add(72*time.Hour), 1)
	check(t, base, db, w, "1d", 24*time.Hour, day0, day0.Add(72*time.Hour), 1)
	lateRow := influxtest.Query(t, base, db, `SELECT "tokens", "ok_seconds" FROM "tpsmon_1h"."tpsmon_server_1h" WHERE "server" = 'late'`)
	if len(lateRow) != 1 || num(lateRow[0].Rows()[0][schema.FieldTokens]) != 777 || num(lateRow[0].Rows()[0]["time"]) != float64(day0.Add(23*time.Hour).Unix()) {
		t.Errorf("the late window's hour: %+v", lateRow)
	}

	count := func() string {
		s := influxtest.Query(t, base, db, `SELECT count("windows"), sum("tokens") FROM "tpsmon_1h"."tpsmon_server_1h"`)
		return fmt.Sprint(s[0].Values)
	}
	before := count()
	if _, err := j.Run(ctx, day0.Add(72*time.Hour+10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if after := count(); after != before {
		t.Errorf("a repeated run changed the rollups: %s -> %s", before, after)
	}

	// The report reads the same numbers from raw windows, hourly and
	// daily rollups.
	c := report.NewClient(base, db, "", 30*time.Second)
	var reports []*report.Report
	for _, lv := range []string{report.Raw, report.Hourly, report.Daily} {
		f, err := report.Plan(ctx, c, report.Filter{From: day0, To: day0.Add(72 * time.Hour), Level: lv})
		if err != nil {
			t.Fatal(err)
		}
		r, err := report.Build(ctx, c, f, report.Options{})
		if err != nil {
			t.Fatalf("%s: %v", lv, err)
		}
		reports = append(reports, r)
	}
	for _, r := range reports[1:] {
		if r.GPUHours != reports[0].GPUHours || r.Tokens != reports[0].Tokens || fmt.Sprint(stateHours(r)) != fmt.Sprint(stateHours(reports[0])) {
			t.Errorf("%s report: %v GPU-hours, %v tokens, %v; raw: %v, %v, %v", r.Level, r.GPUHours, r.Tokens, stateHours(r),
				reports[0].GPUHours, reports[0].Tokens, stateHours(reports[0]))
		}
	}
	// 4 GPUs × 72 h; the late server's window adds a minute of one GPU.
	if h := stateHours(reports[0]); reports[0].GPUHours != 4*72 || h["unused"] != 72 || h[schema.StateIdle] != 2*24 {
		t.Errorf("raw report: %v GPU-hours, %v", reports[0].GPUHours, h)
	}
}

func stateHours(r *report.Report) map[string]float64 {
	out := map[string]float64{}
	for _, s := range r.Waste {
		out[s.State] = math.Round(s.GPUHours*1e9) / 1e9
	}
	return out
}

// TestSuspectRulesApart: the rollup finds a rule's windows by its name in
// the suspect field, so no rule's name may be part of another's.
func TestSuspectRulesApart(t *testing.T) {
	for _, a := range analysis.Rules {
		for _, b := range analysis.Rules {
			if a != b && strings.Contains(a, b) {
				t.Errorf("rule %q contains rule %q", a, b)
			}
		}
	}
}
