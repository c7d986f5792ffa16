package report

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// writeFiveSecond writes six hours of 5-second windows: on node-a (with
// window_s, as tpsmon writes now) server llama on GPUs 0 and 1, ok for the
// first two hours and idle after, and GPU 2 that no server uses; on
// node-old (points from before window_s) server qwen on GPU 0, ok.
func writeFiveSecond(t *testing.T, base, db string, start time.Time) {
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
	const w = 5 * time.Second
	for ts := start; ts.Before(start.Add(6 * time.Hour)); ts = ts.Add(w) {
		state, tokens, util := schema.StateOK, int64(5000), 80.0
		if ts.Sub(start) >= 2*time.Hour {
			state, tokens, util = schema.StateIdle, 0, 1.0
		}
		add(write.NewPoint(schema.Server, map[string]string{schema.TagHost: "node-a", schema.TagServer: "llama", schema.TagGPUs: "0,1"},
			map[string]any{schema.FieldTokens: tokens, schema.FieldSystemTPS: float64(tokens) / 5, schema.FieldState: state, schema.FieldCoverage: 1.0,
				schema.FieldEnergyJ: 2 * 300 * 5.0, schema.FieldTPSPerGPU: float64(tokens) / 10, schema.FieldWindowS: 5.0}, ts))
		for _, g := range []string{"0", "1"} {
			add(write.NewPoint(schema.GPU, map[string]string{schema.TagHost: "node-a", schema.TagGPU: g, schema.TagUUID: "GPU-a" + g, schema.TagServer: "llama", schema.TagName: "H100"},
				map[string]any{schema.FieldUtil: util, schema.FieldUtilMax: util, schema.FieldEnergyJ: 1500.0, schema.FieldCoverage: 1.0, schema.FieldWindowS: 5.0}, ts))
		}
		add(write.NewPoint(schema.GPU, map[string]string{schema.TagHost: "node-a", schema.TagGPU: "2", schema.TagUUID: "GPU-a2", schema.TagName: "H100"},
			map[string]any{schema.FieldUtil: 0.0, schema.FieldUtilMax: 0.0, schema.FieldEnergyJ: 300.0, schema.FieldCoverage: 1.0, schema.FieldWindowS: 5.0}, ts))
		add(write.NewPoint(schema.Server, map[string]string{schema.TagHost: "node-old", schema.TagServer: "qwen", schema.TagGPUs: "0"},
			map[string]any{schema.FieldTokens: int64(1000), schema.FieldSystemTPS: 200.0, schema.FieldState: schema.StateOK, schema.FieldCoverage: 1.0, schema.FieldEnergyJ: 1000.0, schema.FieldTPSPerGPU: 200.0}, ts))
		add(write.NewPoint(schema.GPU, map[string]string{schema.TagHost: "node-old", schema.TagGPU: "0", schema.TagUUID: "GPU-o0", schema.TagServer: "qwen", schema.TagName: "L40S"},
			map[string]any{schema.FieldUtil: 60.0, schema.FieldUtilMax: 70.0, schema.FieldEnergyJ: 1000.0, schema.FieldCoverage: 1.0}, ts))
		if len(buf) > 2<<20 {
			if err := in.Write(context.Background(), buf); err != nil {
				t.Fatal(err)
			}
			buf = buf[:0]
		}
	}
	if err := in.Write(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
}

// TestFiveSecondWindowsWithoutConfig: the report knows nothing of the
// daemon's configuration; six hours of 5-second windows on two GPUs are 12
// GPU-hours, and the GPU no server uses adds its 6 hours as unused.
func TestFiveSecondWindowsWithoutConfig(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "five")
	start := time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)
	writeFiveSecond(t, base, db, start)
	c := NewClient(base, db, "", 30*time.Second)
	ctx := context.Background()
	f, err := Plan(ctx, c, Filter{From: start, To: start.Add(6 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if f.Level != Raw || f.Interval != 5*time.Minute {
		t.Errorf("plan %s every %v, want raw every 5m (6 h / 150 ≥ 5 s)", f.Level, f.Interval)
	}
	r, err := Build(ctx, c, f, Options{Prices: map[string]float64{"H100": 3}})
	if err != nil {
		t.Fatal(err)
	}
	hours := map[string]float64{}
	for _, s := range r.Waste {
		hours[s.State] = s.GPUHours
	}
	// node-a: llama ok 2 h and idle 4 h on 2 GPUs, GPU 2 unused 6 h;
	// node-old (length from spacing): qwen ok 6 h on 1 GPU.
	want := map[string]float64{schema.StateOK: 2*2 + 6, schema.StateIdle: 4 * 2, "unused": 6}
	for st, h := range want {
		if abs(hours[st]-h) > 1e-9 {
			t.Errorf("%s: %v GPU-hours, want %v", st, hours[st], h)
		}
	}
	if len(hours) != len(want) {
		t.Errorf("states %v: rows for states that did not occur", hours)
	}
	if abs(r.GPUHours-24) > 1e-9 {
		t.Errorf("GPU-hours observed %v, want 4 GPUs × 6 h = 24", r.GPUHours)
	}
	if r.Window != "5s" {
		t.Errorf("window %q, want 5s (read from node-old's spacing)", r.Window)
	}
	// H100 priced at 3 for 18 GPU-hours; the L40S unpriced.
	if r.Cost == nil || abs(*r.Cost-54) > 1e-9 || strings.Join(r.Unpriced, ",") != "L40S" {
		t.Errorf("cost %s, unpriced %v", fmtp(r.Cost), r.Unpriced)
	}
	found := strings.Join(r.Findings, "\n")
	if !strings.Contains(found, "gpu 2 (GPU-a2) on node-a was idle 100% of 6.0 h; no server uses it") {
		t.Errorf("findings do not name the unused GPU by UUID:\n%s", found)
	}
	// The fleet series: 72 five-minute buckets; tokens per second of the
	// fleet is 1200 while llama works and 200 after.
	if len(r.Fleet) != 72 {
		t.Fatalf("%d fleet points, want 72", len(r.Fleet))
	}
	if first, last := r.Fleet[0], r.Fleet[71]; abs(first.TPS-1200) > 1e-9 || abs(last.TPS-200) > 1e-9 ||
		abs(first.GPUHours-4*5.0/60) > 1e-9 || abs(last.StateGPUHours[schema.StateIdle]-2*5.0/60) > 1e-9 {
		t.Errorf("fleet first %+v last %+v", first, last)
	}
	// A range whose ends fall inside buckets: their tokens per second are
	// over the part of them the range holds, not the whole bucket.
	f, err = Plan(ctx, c, Filter{From: start.Add(90 * time.Second), To: start.Add(6*time.Hour - 100*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if r, err = Build(ctx, c, f, Options{}); err != nil {
		t.Fatal(err)
	}
	if first, last := r.Fleet[0], r.Fleet[len(r.Fleet)-1]; abs(first.TPS-1200) > 1e-9 || abs(last.TPS-200) > 1e-9 ||
		first.Time.Equal(start.Add(90*time.Second)) {
		t.Errorf("ragged range, every %v: fleet first %v at %.3f tok/s, last %v at %.3f; want 1200 and 200 over the parts the range holds",
			f.Interval, first.Time, first.TPS, last.Time, last.TPS)
	}
}
