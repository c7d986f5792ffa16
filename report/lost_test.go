package report

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// ceilingDay is a known day of 10-minute windows that carry window_s:
//   - node-a/llama on GPUs 0,1: idle before 08:00 (no ceiling), else 1000
//     tokens/s under a ceiling of 2500 at MBU 0.4;
//   - node-b/mistral on GPU 0: 100 tokens/s, no model facts (no ceiling);
//   - node-b/qwen on GPU 1: 2000 tokens/s; on odd hours under a ceiling of
//     2500 at MBU 0.8, on even ones above a ceiling of 1900 (MBU 1.05: a
//     wrong fact, which loses nothing and is counted apart).
var ceilingDay = time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)

type ceilWin struct {
	host, server, gpus      string
	tps, ceiling, mbu, runs float64 // ceiling 0: none
}

func ceilingWindows(t time.Time) []ceilWin {
	llama := ceilWin{"node-a", "llama", "0,1", 1000, 2500, 0.4, 8}
	if t.Hour() < 8 {
		llama = ceilWin{"node-a", "llama", "0,1", 0, 0, 0, 0}
	}
	qwen := ceilWin{"node-b", "qwen", "1", 2000, 2500, 0.8, 32}
	if t.Hour()%2 == 0 {
		qwen.ceiling, qwen.mbu = 1900, 1.05
	}
	return []ceilWin{llama, {"node-b", "mistral", "0", 100, 0, 0, 4}, qwen}
}

func writeCeilingDay(t *testing.T, base, db string) {
	t.Helper()
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	for ts := ceilingDay; ts.Before(ceilingDay.Add(24 * time.Hour)); ts = ts.Add(weekWindow) {
		for _, w := range ceilingWindows(ts) {
			ngpu := float64(len(strings.Split(w.gpus, ",")))
			state := schema.StateOK
			if w.runs == 0 {
				state = schema.StateIdle
			}
			f := map[string]any{schema.FieldTokens: int64(w.tps * weekWindow.Seconds()), schema.FieldSystemTPS: w.tps, schema.FieldRunning: w.runs,
				schema.FieldState: state, schema.FieldCoverage: 1.0, schema.FieldWindowS: weekWindow.Seconds(), schema.FieldTPSPerGPU: w.tps / ngpu,
				schema.FieldEnergyJ: 300 * ngpu * weekWindow.Seconds()}
			if w.ceiling > 0 {
				f[schema.FieldCeilingTPS], f[schema.FieldMBU] = w.ceiling, w.mbu
			}
			p := write.NewPoint(schema.Server, map[string]string{schema.TagHost: w.host, schema.TagServer: w.server, schema.TagGPUs: w.gpus}, f, ts)
			if buf, err = enc.AppendWrite(buf, p); err != nil {
				t.Fatal(err)
			}
			for _, g := range strings.Split(w.gpus, ",") {
				gp := write.NewPoint(schema.GPU, map[string]string{schema.TagHost: w.host, schema.TagGPU: g, schema.TagUUID: w.host + "-" + g, schema.TagServer: w.server},
					map[string]any{schema.FieldUtil: 50.0, schema.FieldEnergyJ: 300 * weekWindow.Seconds(), schema.FieldCoverage: 1.0, schema.FieldWindowS: weekWindow.Seconds()}, ts)
				buf, _ = enc.AppendWrite(buf, gp)
			}
		}
	}
	if err := in.Write(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
}

// TestLostThroughputRanking ranks the known day's servers by the
// throughput they lost below their ceiling, from a real InfluxDB.
func TestLostThroughputRanking(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "lost")
	writeCeilingDay(t, base, db)
	f := Filter{From: ceilingDay, To: ceilingDay.Add(24 * time.Hour), Interval: time.Hour}
	r, err := Build(context.Background(), NewClient(base, db, "", 30*time.Second), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkLostDay(t, r)

	// The page shows the ranking.
	var b bytes.Buffer
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	i, j := strings.Index(page, "<td>llama</td><td>0,1</td><td class=\"n\">19.2</td>"), strings.Index(page, "<td>qwen</td><td>1</td><td class=\"n\">2.4</td>")
	if i < 0 || j < 0 || j < i {
		os.WriteFile(filepath.Join(t.TempDir(), "lost.html"), b.Bytes(), 0o644)
		t.Errorf("the page does not rank llama (19.2 GPU-h) above qwen (2.4): %d, %d", i, j)
	}
}

// checkLostDay checks a report of ceilingDay (from raw windows or their
// rollups) against what was written.
func checkLostDay(t *testing.T, r *Report) {
	t.Helper()
	near := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 1e-9*math.Max(1, want) {
			t.Errorf("%s = %s, want %v", what, fmtp(got), want)
		}
	}
	if len(r.Lost) != 3 {
		t.Fatalf("lost throughput of %d servers, want 3: %+v", len(r.Lost), r.Lost)
	}
	llama, qwen, mistral := r.Lost[0], r.Lost[1], r.Lost[2]
	if llama.Server != "llama" || qwen.Server != "qwen" || mistral.Server != "mistral" {
		t.Fatalf("ranking %s, %s, %s; want llama, qwen, mistral", llama.Server, qwen.Server, mistral.Server)
	}
	// llama: 96 windows of 600 s at 1500 tokens/s below the ceiling, 60 %
	// of the time of 2 GPUs.
	near("llama lost tokens", llama.LostTokens, 96*1500*600)
	near("llama lost GPU-hours", llama.LostGPUHours, 96*0.6*600*2/3600.0)
	near("llama lost share", llama.LostShare, 0.6)
	near("llama MBU", llama.MBU, 0.4)
	if llama.CeilingWindows != 96 || llama.WindowsWithoutCeiling != 48 || llama.AboveCeilingTokens != 0 {
		t.Errorf("llama windows %d with a ceiling, %d without, %v above; want 96, 48, 0", llama.CeilingWindows, llama.WindowsWithoutCeiling, llama.AboveCeilingTokens)
	}
	// qwen: the odd hours lose 500 tokens/s (20 % of 1 GPU); the even ones
	// are 100 tokens/s above theirs and lose nothing.
	near("qwen lost tokens", qwen.LostTokens, 72*500*600)
	near("qwen lost GPU-hours", qwen.LostGPUHours, 72*0.2*600/3600.0)
	near("qwen above the ceiling", &qwen.AboveCeilingTokens, 72*100*600)
	near("qwen lost share", qwen.LostShare, 72*500.0/(72*(2500+1900)))
	near("qwen MBU", qwen.MBU, (0.8+1.05)/2)
	if qwen.CeilingWindows != 144 || qwen.WindowsWithoutCeiling != 0 {
		t.Errorf("qwen windows %d with a ceiling, %d without", qwen.CeilingWindows, qwen.WindowsWithoutCeiling)
	}
	if mistral.LostTokens != nil || mistral.LostGPUHours != nil || mistral.MBU != nil || mistral.WindowsWithoutCeiling != 144 {
		t.Errorf("mistral, without facts: %+v; want no loss and 144 windows without a ceiling", mistral)
	}
	near("fleet lost tokens", r.LostTokens, 96*1500*600+72*500*600)
	near("fleet lost GPU-hours", r.LostGPUHours, 19.2+2.4)
	if r.WindowsWithoutCeiling != 48+144 {
		t.Errorf("windows without a ceiling %d, want 192", r.WindowsWithoutCeiling)
	}
	all := strings.Join(r.Findings, "\n")
	for _, w := range []string{
		"server llama on node-a decoded 19.2 GPU-hours' worth below its decode ceiling at a mean MBU of 40%",
		"192 server windows had no decode ceiling",
		"mistral on node-b 144 of 144",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("finding %q missing from:\n%s", w, all)
		}
	}
}
