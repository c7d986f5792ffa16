package rollup

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// TestRollupCeilingTimeWeighted: one hour of one server on two GPUs with
// windows of unequal length: 30 of 100 s at MBU 0.2 under a ceiling of
// 1000 tokens/s (500 observed), 30 of 20 s at MBU 0.8 above a ceiling of
// 3000 (3300 observed), and 10 of 60 s without a ceiling. The hour's means
// weigh by length (a plain mean would read 0.5 and 2000), the lost
// throughput is the windows' sum clamped at zero, and the report ranks
// the same from the rollups as from the raw windows.
func TestRollupCeilingTimeWeighted(t *testing.T) {
	base, db := setup(t)
	hour := day0.Add(5 * time.Hour)
	var lines []string
	for i := range 70 {
		ts := hour.Add(time.Duration(i) * 50 * time.Second)
		f := "system_tps=500,ceiling_tps=1000,mbu=0.2,window_s=100"
		switch {
		case i >= 60:
			f = "system_tps=40,window_s=60"
		case i%2 == 1:
			f = "system_tps=3300,ceiling_tps=3000,mbu=0.8,window_s=20"
		}
		lines = append(lines, fmt.Sprintf(`tpsmon_server,host=node-c,server=moe,gpus=0\,1 coverage=1,state="ok",%s %d`, f, ts.UnixMilli()))
	}
	influxtest.Write(t, base, db, strings.Join(lines, "\n"))
	j := job(t, base, db)
	j.First = hour
	ctx := context.Background()
	if _, err := j.Run(ctx, hour.Add(25*time.Hour)); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		schema.FieldMBU:                (30*100*0.2 + 30*20*0.8) / 3600,
		schema.FieldCeilingTPS:         (30*100*1000 + 30*20*3000) / 3600.0,
		schema.FieldMBUSeconds:         3600,
		schema.FieldCeilingSeconds:     3600,
		schema.FieldCeilingWindows:     60,
		schema.FieldLostTokens:         30 * 100 * 500,
		schema.FieldAboveCeilingTokens: 30 * 20 * 300,
		schema.FieldLostSeconds:        30 * 100 * 0.5,
		schema.FieldLostGPUSeconds:     2 * 30 * 100 * 0.5,
		schema.FieldWindows:            70,
	}
	for _, lv := range []string{"1h", "1d"} {
		s := influxtest.Query(t, base, db, fmt.Sprintf(`SELECT * FROM "tpsmon_%s"."tpsmon_server_%s" WHERE "server" = 'moe'`, lv, lv))
		if len(s) != 1 || len(s[0].Values) != 1 {
			t.Fatalf("%s: %d series, want one point: %+v", lv, len(s), s)
		}
		row := s[0].Rows()[0]
		for f, w := range want {
			if got := num(row[f]); math.Abs(got-w) > 1e-9*math.Max(1, w) {
				t.Errorf("%s %s = %v, want %v", lv, f, got, w)
			}
		}
	}
	c := report.NewClient(base, db, "", 30*time.Second)
	var lost []report.Lost
	for _, lv := range []string{report.Raw, report.Hourly, report.Daily} {
		r, err := report.Build(ctx, c, report.Filter{From: day0, To: day0.Add(24 * time.Hour), Interval: time.Hour, Level: lv}, report.Options{})
		if err != nil {
			t.Fatalf("%s: %v", lv, err)
		}
		if len(r.Lost) != 1 || r.Lost[0].LostTokens == nil || r.Lost[0].MBU == nil {
			t.Fatalf("%s report: lost throughput %+v", lv, r.Lost)
		}
		lost = append(lost, r.Lost[0])
	}
	for i, l := range lost {
		got := fmt.Sprintf("%.6g tokens, %.6g GPU-h, MBU %.6g, %.6g above, %d of %d windows", *l.LostTokens, *l.LostGPUHours, *l.MBU, l.AboveCeilingTokens, l.CeilingWindows, l.Windows)
		if w := "1.5e+06 tokens, 0.833333 GPU-h, MBU 0.3, 180000 above, 60 of 70 windows"; got != w {
			t.Errorf("report %d (raw, 1h, 1d): %s, want %s", i, got, w)
		}
	}
}
