package report

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

var update = flag.Bool("update", false, "rewrite packaging/grafana/tpsmon.json and docs/report.png (the 24 h range of TestReportRanges)")

// week is a known week of 10-minute windows on two nodes:
//   - node-a/llama on GPUs 0,1: idle from 00:00 to 08:00 each day, ok
//     otherwise at 1000 tokens/s and 80% utilization; gpu 2 of node-a
//     serves no server and idles at 1%;
//   - node-b/mistral on GPU 0: queue_bound all week, 100 tokens/s at 40%;
//   - node-b/qwen on GPU 1: saturated on even hours, ok on odd ones,
//     2000 tokens/s at 95%.
const weekWindow = 10 * time.Minute

var weekStart = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

type srvWin struct {
	host, server, gpus, state   string
	tps, util, running, waiting float64
}

func weekWindows(t time.Time) []srvWin {
	h := t.Hour()
	llama := srvWin{"node-a", "llama", "0,1", schema.StateOK, 1000, 80, 16, 0}
	if h < 8 {
		llama = srvWin{"node-a", "llama", "0,1", schema.StateIdle, 0, 2, 0, 0}
	}
	qwen := srvWin{"node-b", "qwen", "1", schema.StateOK, 2000, 95, 40, 0}
	if h%2 == 0 {
		qwen.state, qwen.waiting = schema.StateSaturated, 6
	}
	return []srvWin{llama, {"node-b", "mistral", "0", schema.StateQueueBound, 100, 40, 4, 5}, qwen}
}

const latencySource = "histogram"

func writeWeek(t *testing.T, base, db string) {
	t.Helper()
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	for ts := weekStart; ts.Before(weekStart.Add(7 * 24 * time.Hour)); ts = ts.Add(weekWindow) {
		for _, w := range weekWindows(ts) {
			ngpu := float64(len(strings.Split(w.gpus, ",")))
			tokens := int64(w.tps * weekWindow.Seconds())
			energy := (100 + 5*w.util) * ngpu * weekWindow.Seconds()
			f := map[string]any{schema.FieldTokens: tokens, schema.FieldSystemTPS: w.tps, schema.FieldRunning: w.running, schema.FieldWaiting: w.waiting,
				schema.FieldGPUUtil: w.util, schema.FieldEnergyJ: energy, schema.FieldState: w.state, schema.FieldCoverage: 1.0, schema.FieldSource: schema.SourceMetrics,
				schema.FieldTPSPerGPU: w.tps / ngpu}
			if w.running > 0 {
				f[schema.FieldPerUserTPS] = w.tps / w.running
			}
			if w.server == "qwen" {
				// What its users felt: slower first tokens while saturated.
				slow := map[bool]float64{true: 3, false: 1}[w.state == schema.StateSaturated]
				for k, v := range map[string]float64{schema.FieldTTFTP50: 0.2 * slow, schema.FieldTTFTP90: 0.5 * slow, schema.FieldTTFTP99: 0.9 * slow,
					schema.FieldITLP50: 0.02, schema.FieldITLP90: 0.03, schema.FieldITLP99: 0.05,
					schema.FieldSLOAttainmentLo: 0.99 / slow, schema.FieldSLOAttainmentHi: 1 / slow, schema.FieldGoodputRPSLo: 5 / slow} {
					f[k] = v
				}
				f[schema.FieldLatencySource] = latencySource
			}
			p := write.NewPoint(schema.Server, map[string]string{schema.TagHost: w.host, schema.TagServer: w.server, schema.TagEngine: "vllm", schema.TagGPUs: w.gpus}, f, ts)
			if buf, err = enc.AppendWrite(buf, p); err != nil {
				t.Fatal(err)
			}
			for _, g := range strings.Split(w.gpus, ",") {
				gp := write.NewPoint(schema.GPU, map[string]string{schema.TagHost: w.host, schema.TagGPU: g, schema.TagUUID: w.host + "-" + g, schema.TagServer: w.server},
					map[string]any{schema.FieldUtil: w.util, schema.FieldUtilMax: w.util, schema.FieldEnergyJ: energy / ngpu, schema.FieldSamples: int64(600), schema.FieldCoverage: 1.0}, ts)
				buf, _ = enc.AppendWrite(buf, gp)
			}
		}
		idle := write.NewPoint(schema.GPU, map[string]string{schema.TagHost: "node-a", schema.TagGPU: "2", schema.TagUUID: "node-a-2"},
			map[string]any{schema.FieldUtil: 1.0, schema.FieldUtilMax: 3.0, schema.FieldEnergyJ: 60000.0, schema.FieldSamples: int64(600), schema.FieldCoverage: 1.0}, ts)
		buf, _ = enc.AppendWrite(buf, idle)
		if len(buf) > 4<<20 {
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

func weekFilter() Filter {
	return Filter{From: weekStart, To: weekStart.Add(7 * 24 * time.Hour), Interval: time.Hour}
}

func TestDashboardFileIsGenerated(t *testing.T) {
	want, err := Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "packaging", "grafana", "tpsmon.json")
	if *update {
		os.WriteFile(path, append(want, '\n'), 0o644)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
		t.Fatal("packaging/grafana/tpsmon.json differs from Dashboard(): run go test ./report -update")
	}
	// Every panel runs one of the report's queries, word for word, and
	// every query of the list is on the dashboard.
	d := parseDashboard(t, got)
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Description == "" || (p.Type != "state-timeline" && p.FieldConfig.Defaults.Unit == "") {
			t.Errorf("panel %q lacks a description or a unit", p.Title)
		}
		if p.Type == "table" && len(p.Options.SortBy) == 0 {
			t.Errorf("table %q is not sorted", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q runs nothing", p.Title)
		}
		for _, tg := range p.Targets {
			used[tg.Query] = true
		}
	}
	reportOnly := map[string]bool{}
	for _, q := range ReportOnly {
		reportOnly[q.Name] = true
	}
	for _, q := range Queries {
		if !used[q.Text] && !used[q.Rollup] && !reportOnly[q.Name] {
			t.Errorf("query %s is on no panel", q.Name)
		}
		if reportOnly[q.Name] && (used[q.Text] || used[q.Rollup]) {
			t.Errorf("query %s is report-only but on a panel", q.Name)
		}
		delete(used, q.Text)
		delete(used, q.Rollup)
	}
	for q := range used {
		t.Errorf("a panel runs a query the report does not share: %.120s", q)
	}
	var imp struct {
		Inputs []struct {
			Name, Type string
			PluginID   string `json:"pluginId"`
		} `json:"__inputs"`
		Requires []struct{ Type, ID string } `json:"__requires"`
	}
	if err := json.Unmarshal(got, &imp); err != nil || len(imp.Inputs) != 1 || imp.Inputs[0].PluginID != "influxdb" || len(imp.Requires) < 3 {
		t.Errorf("__inputs/__requires: %+v (%v)", imp, err)
	}
	if !bytes.Contains(got, []byte(`"uid": "${DS_INFLUXDB}"`)) {
		t.Error("panels do not use the __inputs data source placeholder")
	}
}

type dashboardJSON struct {
	Panels []struct {
		Title, Type, Description string
		FieldConfig              struct {
			Defaults struct{ Unit string }
		}
		Options struct {
			SortBy []struct{ DisplayName string }
		}
		Targets []struct {
			Query string `json:"query"`
		} `json:"targets"`
	} `json:"panels"`
}

func parseDashboard(t *testing.T, b []byte) dashboardJSON {
	t.Helper()
	var d dashboardJSON
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDashboardQueriesOnAWeek(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "week")
	writeWeek(t, base, db)
	c := NewClient(base, db, "", 30*time.Second)
	ctx := context.Background()
	f := weekFilter()
	run := func(q Query, state string) []influxql.Series {
		text, err := f.Render(q, state)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Query(ctx, text)
		if err != nil {
			t.Fatalf("%s: %v", q.Name, err)
		}
		return s
	}
	val := func(s influxql.Series, col string) float64 {
		v, ok := influxql.Num(s.Rows()[0][col])
		if !ok {
			t.Fatalf("%s has no %s: %v", s.Tags, col, s.Rows()[0])
		}
		return v
	}
	// Every raw query parses and returns a series per server or GPU, but
	// those of the fields these older points lack (the GPUs' throttle
	// and readings beyond util, MBU).
	lacking := map[string]bool{}
	for _, q := range []Query{GPUThrottle, GPUSMActive, GPUMemUsed, GPUPower, GPUTemp, GPUSMClock, MBUSeries} {
		lacking[q.Name] = true
	}
	for _, q := range Queries {
		if q.Text == "" || lacking[q.Name] {
			continue
		}
		if n := len(run(q, schema.StateQueueBound)); n == 0 {
			t.Errorf("%s returned nothing", q.Name)
		}
	}
	perDay := 24 * 6
	for _, s := range run(StateTime, schema.StateIdle) {
		if s.Tags[schema.TagServer] != "llama" || val(s, schema.FieldWindows) != float64(7*8*6) {
			t.Errorf("idle windows %v %v", s.Tags, s.Rows())
		}
	}
	for _, s := range run(StateTime, schema.StateSaturated) {
		if s.Tags[schema.TagServer] != "qwen" || val(s, schema.FieldWindows) != float64(7*perDay/2) {
			t.Errorf("saturated windows %v %v", s.Tags, s.Rows())
		}
	}
	for _, s := range run(UnusedGPUs, "") {
		if s.Tags[schema.TagHost] != "node-a" || s.Tags[schema.TagGPU] != "2" || val(s, schema.FieldUtil) != 1 || val(s, schema.FieldWindows) != float64(7*perDay) {
			t.Errorf("unused GPUs %v %v", s.Tags, s.Rows())
		}
	}
	for _, s := range run(Ranking, "") {
		want := map[string]float64{"llama": 500 * 3600 * 16 / 24, "mistral": 100 * 3600, "qwen": 2000 * 3600}[s.Tags[schema.TagServer]]
		if got := val(s, "tokens_per_gpu_hour"); abs(got-want) > 1e-6*want {
			t.Errorf("%s tokens per GPU-hour %v, want %v", s.Tags[schema.TagServer], got, want)
		}
	}
	for _, s := range run(TokensPerJoule, "") {
		// mistral: 100 tok/s over (100+5*40) W on one GPU.
		if s.Tags[schema.TagServer] == "mistral" && abs(val(s, schema.FieldTokensPerJoule)-100.0/300) > 1e-9 {
			t.Errorf("mistral tokens/J %v", val(s, schema.FieldTokensPerJoule))
		}
	}
	series := run(ServerSeries, "")
	if len(series) != 3 || len(series[0].Values) != 7*24 {
		t.Errorf("server series: %d series, %d hourly points", len(series), len(series[0].Values))
	}
}

func abs(v float64) float64 {
	if v < 0 {
		return -v
	}
	return v
}

func TestReportOnAWeek(t *testing.T) {
	t.Parallel()
	warmBrowser()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "reportweek")
	writeWeek(t, base, db)
	r, err := Build(context.Background(), NewClient(base, db, "", 30*time.Second), weekFilter(),
		Options{Prices: map[string]float64{"*": 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"gpu 2 (node-a-2) on node-a was idle 100% of 168.0 h; no server uses it",
		"server llama on node-a was idle 33% of the time: no tokens and nothing running",
		"server mistral on node-b was queue_bound 100% of the time",
		"server qwen on node-b was saturated 50% of the time",
		"lowest tokens per GPU-hour: mistral on node-b with 360000, against 7200000 for qwen on node-b",
	}
	all := strings.Join(r.Findings, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("finding %q missing from:\n%s", w, all)
		}
	}
	hours := map[string]float64{}
	for _, s := range r.Waste {
		hours[s.State] = s.GPUHours
	}
	// These points carry no window_s: their 10 minutes come from their
	// spacing. llama idles 8 h a day on 2 GPUs; mistral is queue-bound 24 h
	// on 1; gpu 2 of node-a serves nobody all week.
	wantHours := map[string]float64{schema.StateIdle: 7 * 8 * 2, schema.StateOK: 7*16*2 + 7*12, schema.StateQueueBound: 7 * 24, schema.StateSaturated: 7 * 12, "unused": 7 * 24}
	for st, h := range wantHours {
		if abs(hours[st]-h) > 1e-9 {
			t.Errorf("GPU-hours %s = %v, want %v", st, hours[st], h)
		}
	}
	if len(hours) != len(wantHours) {
		t.Errorf("states %v, want only %v (no rows for states that did not occur)", hours, wantHours)
	}
	// Five GPUs, a week each; at 2 per GPU-hour.
	if r.GPUHours != 5*168 || r.Cost == nil || *r.Cost != 2*5*168 {
		t.Errorf("GPU-hours %v, cost %v, want 840 and 1680", r.GPUHours, fmtp(r.Cost))
	}
	if r.Window != "10m0s" {
		t.Errorf("window %q, want the data's 10m0s", r.Window)
	}
	var js bytes.Buffer
	if err := json.NewEncoder(&js).Encode(r); err != nil {
		t.Fatal(err)
	}
	var back struct {
		States []struct {
			State string
			By    []struct {
				Host, UUID string
				GPUHours   float64 `json:"gpu_hours"`
			}
		} `json:"gpu_hours_by_state"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("gpu_hours_by_state is not a list of numbers: %v", err)
	}
	for _, st := range back.States {
		if st.State == "unused" && (len(st.By) != 1 || st.By[0].UUID != "node-a-2" || st.By[0].GPUHours != 168) {
			t.Errorf("unused by %+v", st.By)
		}
	}

	// The HTML renders, and a browser shows something.
	dir := t.TempDir()
	html := filepath.Join(dir, "report.html")
	f, _ := os.Create(html)
	if err := WriteHTML(f, r); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, _ := os.ReadFile(html)
	if bytes.Contains(b, []byte("http://")) || bytes.Contains(b, []byte("https://")) || bytes.Contains(b, []byte("<script")) {
		t.Error("the report loads something from outside itself")
	}
	if n := bytes.Count(b, []byte("<svg")); n != 4+3*(5+1)+3 {
		t.Errorf("%d charts, want 4 of the fleet, 5 per server and its operating curve, and qwen's 3 of latency", n)
	}
	shot := filepath.Join(dir, "report.png")
	screenshot(t, html, shot)
	checkNotBlank(t, shot)
}

// checkNotBlank wants a picture with many colours, most of it not white.
func checkNotBlank(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	colors := map[uint32]bool{}
	dark := 0
	bnd := img.Bounds()
	for y := bnd.Min.Y; y < bnd.Max.Y; y += 2 {
		for x := bnd.Min.X; x < bnd.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			colors[(r>>11)<<10|(g>>11)<<5|b>>11] = true
			if r < 0x8000 && g < 0x8000 && b < 0x8000 {
				dark++
			}
		}
	}
	if len(colors) < 20 || dark < 500 {
		t.Errorf("screenshot looks blank: %d colours, %d dark pixels", len(colors), dark)
	}
	fmt.Fprintf(os.Stderr, "screenshot: %dx%d, %d colours, %d dark pixels sampled\n", bnd.Dx(), bnd.Dy(), len(colors), dark)
}

func fmtp(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}
