package rollup

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// TestCurveRollupMatchesWindows: a day of 1-minute windows of a server
// sweeping 1..24 running, hour by hour, some prompt-heavy; the report's
// curve from the hourly rollups has the raw windows' bins (windows,
// GPU-hours exactly; the quantiles of bins within one hour exactly, of
// wider bins, of several hours at different speeds, within 7 %) and the
// same operating point, from the daily cells or the hourly ones.
func TestCurveRollupMatchesWindows(t *testing.T) {
	base, db := setup(t)
	var b strings.Builder
	for ts := day0; ts.Before(day0.Add(24 * time.Hour)); ts = ts.Add(time.Minute) {
		h := ts.Hour()
		run := float64(h) + 0.9 + 0.2*float64(ts.Minute()%3)/2 // h+0.9 .. h+1.1
		user := 120 / math.Sqrt(run) * (1 + 0.05*math.Sin(float64(ts.Minute())))
		prompt := 10 * user * run
		if ts.Minute()%10 == 0 {
			prompt = 100 * user * run // prompt-heavy: a curve of its own
		}
		fmt.Fprintf(&b, "%s,host=n1,server=llm,engine=vllm,model=m,gpus=0\\,1 running=%g,system_tps=%g,per_user_tps=%g,tokens=%di,prompt_tokens=%di,window_s=60,coverage=1,state=\"ok\" %d\n",
			schema.Server, run, run*user, user, int64(60*run*user), int64(prompt), ts.UnixMilli())
	}
	// An idle window, and one with an absurd rate: neither on the curve.
	fmt.Fprintf(&b, "%s,host=n1,server=llm,engine=vllm,model=m,gpus=0\\,1 running=0,tokens=0i,window_s=60,coverage=1,state=\"idle\" %d\n", schema.Server, day0.Add(24*time.Hour).UnixMilli())
	fmt.Fprintf(&b, "%s,host=n1,server=llm,engine=vllm,model=m,gpus=0\\,1 running=3,system_tps=-5,per_user_tps=1,window_s=60,coverage=1,state=\"ok\" %d\n", schema.Server, day0.Add(24*time.Hour+time.Minute).UnixMilli())
	influxtest.Write(t, base, db, b.String())
	j := job(t, base, db)
	ctx := context.Background()
	if _, err := j.Run(ctx, day0.Add(26*time.Hour)); err != nil {
		t.Fatal(err)
	}
	c := report.NewClient(base, db, "", 30*time.Second)
	// From midnight the day is read from the daily cells; from 01:00 every
	// hour from the hourly ones.
	for _, from := range []time.Time{day0, day0.Add(time.Hour)} {
		checkCurveRollup(t, c, from, day0.Add(25*time.Hour))
	}
}

func checkCurveRollup(t *testing.T, c *report.Client, from, to time.Time) {
	t.Helper()
	ctx := context.Background()
	get := func(level string) []curve.Curve {
		f, err := report.Plan(ctx, c, report.Filter{From: from, To: to, Level: level})
		if err != nil {
			t.Fatal(err)
		}
		r, err := report.Build(ctx, c, f, report.Options{PerUserFloor: 40})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Servers) != 1 {
			t.Fatalf("%s: %d servers", level, len(r.Servers))
		}
		return r.Servers[0].OperatingCurve
	}
	raw, hourly := get(report.Raw), get(report.Hourly)
	if len(raw) != 2 || len(hourly) != 2 {
		t.Fatalf("curves: raw %d, hourly %d; want decode and prompt", len(raw), len(hourly))
	}
	for i := range raw {
		r, h := raw[i], hourly[i]
		if r.Kind != h.Kind || r.Windows != h.Windows || len(r.Bins) != len(h.Bins) || h.Exactness != curve.RollupExactness {
			t.Fatalf("from %v: %s: raw %d windows in %d bins, hourly %s %d in %d (%s)", from, r.Kind, r.Windows, len(r.Bins), h.Kind, h.Windows, len(h.Bins), h.Exactness)
		}
		for k := range r.Bins {
			rb, hb := r.Bins[k], h.Bins[k]
			if rb.Running != hb.Running || rb.Windows != hb.Windows || math.Abs(rb.GPUHours-hb.GPUHours) > 1e-6*rb.GPUHours ||
				math.Abs(rb.RunningMean-hb.RunningMean) > 1e-6*rb.RunningMean {
				t.Errorf("%s bin %s: raw %+v, hourly %+v", r.Kind, rb.Running, rb, hb)
			}
			// A bin of one hour's windows (1..8) has its quantiles exactly; a
			// wider one (9-12: four hours) the median of its hours'.
			tol := 1e-6 // seven digits in the cells field
			if strings.Contains(rb.Running, "-") {
				tol = 0.07
			}
			for _, p := range [][2]float64{{rb.SystemTPS.P50, hb.SystemTPS.P50}, {rb.PerUserTPS.P10, hb.PerUserTPS.P10},
				{rb.PerUserTPS.P50, hb.PerUserTPS.P50}, {rb.PerUserTPS.P90, hb.PerUserTPS.P90}} {
				if math.Abs(p[1]-p[0])/p[0] > tol {
					t.Errorf("%s bin %s: hourly %v against raw %v", r.Kind, rb.Running, p[1], p[0])
				}
			}
		}
		// The means add across periods: exact in every bin, wide ones too.
		for k := range r.Bins {
			rb, hb := r.Bins[k], h.Bins[k]
			for _, p := range [][2]*float64{{rb.SystemTPS.Mean, hb.SystemTPS.Mean}, {rb.PerUserTPS.Mean, hb.PerUserTPS.Mean}} {
				if p[0] == nil || p[1] == nil || math.Abs(*p[1]-*p[0]) > 1e-6**p[0] {
					t.Errorf("%s bin %s: hourly mean %v against raw %v", r.Kind, rb.Running, p[1], p[0])
				}
			}
		}
		ro, ho := r.Operating, h.Operating
		if ro.Running != ho.Running || ro.KneeObserved != ho.KneeObserved || math.Abs(*ro.SystemTPS-*ho.SystemTPS) > 1e-6**ro.SystemTPS {
			t.Errorf("%s: operating point raw %+v, hourly %+v", r.Kind, ro, ho)
		}
		if len(h.Frontier) == 0 || len(h.Frontier) > len(h.Bins)*24 {
			t.Errorf("%s: hourly frontier of %d points", r.Kind, len(h.Frontier))
		}
	}
	// Per-user 120/sqrt(running) meets 40 up to 9 running; bin 9-12's
	// median (about 36) does not: the decode curve's point is bin 8.
	if op := raw[0].Operating; raw[0].Kind != curve.Decode || op.Running != "8" || !op.KneeObserved {
		t.Errorf("from %v: decode operating point %+v", from, op)
	}
}

// TestCurveRollupKeepsEngineVersion: windows of two engine versions, and
// of none stated, are three curves from the hourly cells as from the raw
// windows; unknown is never merged into a known version.
func TestCurveRollupKeepsEngineVersion(t *testing.T) {
	base, db := setup(t)
	var b strings.Builder
	for ts := day0; ts.Before(day0.Add(3 * time.Hour)); ts = ts.Add(time.Minute) {
		tag := []string{",engine_version=0.6.3", ",engine_version=0.7.0", ""}[ts.Hour()]
		fmt.Fprintf(&b, "%s,host=n1,server=llm,engine=vllm%s,model=m,gpus=0 running=2,system_tps=100,per_user_tps=50,tokens=6000i,prompt_tokens=10i,window_s=60,coverage=1,state=\"ok\" %d\n",
			schema.Server, tag, ts.UnixMilli())
	}
	influxtest.Write(t, base, db, b.String())
	if _, err := job(t, base, db).Run(context.Background(), day0.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
	c := report.NewClient(base, db, "", 30*time.Second)
	for _, level := range []string{report.Raw, report.Hourly} {
		f, err := report.Plan(context.Background(), c, report.Filter{From: day0, To: day0.Add(3 * time.Hour), Level: level})
		if err != nil {
			t.Fatal(err)
		}
		cs, _, err := report.OperatingCurves(context.Background(), c, f, 20)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, cv := range cs {
			got = append(got, fmt.Sprintf("%s:%d", cv.Version, cv.Windows))
		}
		if strings.Join(got, " ") != ":60 0.6.3:60 0.7.0:60" {
			t.Errorf("%s: curves by engine version %v, want one each of 60 windows", level, got)
		}
	}
}
