package report

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// sweepLines are a server's 10 s windows through a concurrency sweep:
// 30 windows at each of 1, 2, 4, 8 and 16 running (mean running a little
// off the integer, as measured), per-user TPS 100, 90, 60, 30, 12 and
// system TPS = running x per-user; idle windows between levels; one
// window with a NaN-free absurd rate that must be counted, not drawn.
func sweepLines(start time.Time) (string, time.Time) {
	var b strings.Builder
	t := start
	for _, lv := range []struct{ running, user float64 }{{1, 100}, {2, 90}, {4, 60}, {8, 30}, {16, 12}} {
		for i := 0; i < 30; i++ {
			j := float64(i%5-2) * 0.01
			run := lv.running * (1 - 0.02*j)
			user := lv.user * (1 + j)
			sys := run * user
			fmt.Fprintf(&b, "%s,host=n1,server=llm,engine=vllm,model=m,gpus=0\\,1 running=%g,system_tps=%g,per_user_tps=%g,tokens=%di,prompt_tokens=%di,window_s=10,coverage=1 %d\n",
				schema.Server, run, sys, user, int64(sys*10), int64(sys), t.UnixMilli())
			t = t.Add(10 * time.Second)
		}
		fmt.Fprintf(&b, "%s,host=n1,server=llm,engine=vllm,model=m,gpus=0\\,1 running=0,tokens=0i,window_s=10,coverage=1 %d\n", schema.Server, t.UnixMilli())
		t = t.Add(10 * time.Second)
	}
	fmt.Fprintf(&b, "%s,host=n1,server=llm,engine=vllm,model=m,gpus=0\\,1 running=3,system_tps=1.5e7,per_user_tps=10,tokens=1i,window_s=10,coverage=1 %d\n", schema.Server, t.UnixMilli())
	return b.String(), t.Add(10 * time.Second)
}

var curveShot = flag.String("curve-shot", "", "save a screenshot of TestOperatingCurveFromWindows's page (floor 50) at this path")

func TestOperatingCurveFromWindows(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "curve")
	start := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	lines, end := sweepLines(start)
	influxtest.Write(t, base, db, lines)
	c := NewClient(base, db, "", 30*time.Second)
	ctx := context.Background()
	for _, tc := range []struct {
		floor     float64
		running   string
		sys       float64
		knee      bool
		aboveNote string
	}{
		{20, "8", 240, true, ""},
		{50, "4", 240, true, ""},
		{5, "13-16", 192, false, "knee not observed above concurrency 13-16"},
	} {
		f, err := Plan(ctx, c, Filter{From: start, To: end})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Build(ctx, c, f, Options{PerUserFloor: tc.floor})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Servers) != 1 || len(r.Servers[0].OperatingCurve) != 1 {
			t.Fatalf("servers %+v", r.Servers)
		}
		if r.CurveSkipped[curve.SkipBadRate] != 1 {
			t.Errorf("skipped %v, want the absurd window counted", r.CurveSkipped)
		}
		cv := r.Servers[0].OperatingCurve[0]
		if cv.Kind != curve.Decode || cv.Model != "m" || cv.Exactness != "exact" || len(cv.Bins) != 5 || cv.Windows != 150 {
			t.Fatalf("curve %+v", cv)
		}
		for i, want := range []float64{100, 90, 60, 30, 12} {
			bn := cv.Bins[i]
			if math.Abs(bn.PerUserTPS.P50-want) > 1e-9 || bn.Windows != 30 || math.Abs(bn.GPUHours-30*10*2/3600.0) > 1e-9 {
				t.Errorf("bin %s: %+v per-user %+v", bn.Running, bn, bn.PerUserTPS)
			}
			// The means, from what was written: tokens per second of the
			// bin's windows, per-user TPS per stream-second.
			var sysSum, userSum, userW float64
			for k := 0; k < 30; k++ {
				j := float64(k%5-2) * 0.01
				run := []float64{1, 2, 4, 8, 16}[i] * (1 - 0.02*j)
				user := want * (1 + j)
				sysSum, userSum, userW = sysSum+run*user, userSum+user*run, userW+run
			}
			if bn.SystemTPS.Mean == nil || bn.PerUserTPS.Mean == nil || math.Abs(*bn.SystemTPS.Mean-sysSum/30) > 1e-6 || math.Abs(*bn.PerUserTPS.Mean-userSum/userW) > 1e-6 {
				t.Errorf("bin %s means %v %v, want %v %v", bn.Running, bn.SystemTPS.Mean, bn.PerUserTPS.Mean, sysSum/30, userSum/userW)
			}
		}
		if cv.Means != curve.MeansDefinition {
			t.Errorf("means %q", cv.Means)
		}
		op := cv.Operating
		if !op.Met || op.Running != tc.running || op.KneeObserved != tc.knee || math.Abs(*op.SystemTPS-tc.sys) > 0.01 {
			t.Errorf("floor %v: %+v", tc.floor, op)
			continue
		}
		// Median system TPS of the 150 windows (30 each near 100, 180,
		// 240, 240, 192): the 16-running level's, 192.
		if math.Abs(*cv.MedianSystemTPS-192) > 0.01 || math.Abs(*op.Headroom-tc.sys/192) > 1e-4 {
			t.Errorf("median %v headroom %v", *cv.MedianSystemTPS, *op.Headroom)
		}
		if tc.aboveNote != "" && !strings.Contains(op.Note, tc.aboveNote) {
			t.Errorf("note %q", op.Note)
		}
		js, _ := json.Marshal(r)
		if !bytes.Contains(js, []byte(`"operating_curve":[{`)) || !bytes.Contains(js, []byte(`"operating_point":{`)) {
			t.Errorf("JSON lacks operating_curve: %.300s", js)
		}
		var page bytes.Buffer
		if err := WriteHTML(&page, r); err != nil {
			t.Fatal(err)
		}
		h := page.String()
		if !strings.Contains(h, "Operating curve (decode, m, GPUs 0,1)") || !strings.Contains(h, fmt.Sprintf("floor %g tok/s", tc.floor)) ||
			!strings.Contains(h, `r="8" fill="none" stroke="#d6452f"`) || !strings.Contains(h, "tok/s per user per stream-second (means)") {
			t.Errorf("floor %v: the page lacks the curve chart, its floor or its operating point", tc.floor)
		}
		if *curveShot != "" && tc.floor == 50 {
			// The chart alone, twice its size, with the page's styles.
			style := h[strings.Index(h, "<style>") : strings.Index(h, "</style>")+8]
			one := "<!doctype html><html><head>" + style + `</head><body style="margin:8px"><div style="zoom:2">` + string(curveChart(cv)) + "</div></body></html>"
			html := filepath.Join(t.TempDir(), "curve.html")
			if err := os.WriteFile(html, []byte(one), 0o644); err != nil {
				t.Fatal(err)
			}
			screenshot(t, html, *curveShot)
			checkNotBlank(t, *curveShot)
		}
	}
}
