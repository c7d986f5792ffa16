package agent

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/window"
)

// allPresent sets every optional value of the struct *p.
func allPresent(p any) {
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Struct && f.FieldByName("OK").IsValid() {
			f.FieldByName("OK").SetBool(true)
		}
	}
}

var wmStart = time.Unix(1_700_000_000, 0)

// fullWindows is a closed window with every value of a server and a GPU
// present, its strings ones that have codes.
func fullWindows() analysis.Closed {
	var sw analysis.ServerWindow
	allPresent(&sw.ServerWindow)
	allPresent(&sw)
	sw.Start, sw.Length, sw.Host, sw.Server, sw.Engine, sw.Model = wmStart, 10*time.Second, "h", "s", "vllm", "m"
	sw.GPUs = []string{"0"}
	sw.State, sw.Source = schema.StateKVBound, schema.SourceMetrics
	sw.SpecFinding, sw.Suspect = window.Some(""), window.Some(strings.Join(analysis.Rules, ","))
	sw.Finding = window.Some(analysis.FindingNearCeiling)
	q := latency.Quantile{Value: 0.2, OK: true, Lo: 0.1, Hi: 0.25, Bounded: true, N: 100}
	sw.Latency = latency.Summary{Source: latency.SourceHistogram, Reason: "ttft: histogram counter reset",
		Attainment:   latency.Attainment{Lo: 0.9, Hi: 0.9, Exact: true, OK: true, Requests: 100, MetLo: 90, MetHi: 90},
		GoodputRPSLo: 9, GoodputRPSHi: 9, GoodputTPSLo: 900, GoodputTPSHi: 900}
	for i := range sw.Latency.TTFT {
		sw.Latency.TTFT[i], sw.Latency.ITL[i] = q, q
	}
	for i := range sw.Latency.E2E {
		sw.Latency.E2E[i], sw.Latency.Queue[i], sw.Latency.PerUserTPS[i] = q, q, q
	}
	sw.SLOMiss = "decode"
	var gw analysis.GPUWindow
	allPresent(&gw.GPUWindow)
	gw.Start, gw.Length, gw.Host, gw.Label, gw.UUID, gw.Name = wmStart, 10*time.Second, "h", "0", "GPU-x", "H100"
	gw.EnergySource, gw.Error, gw.SMClockMHz = window.Some(schema.EnergyCounter), window.Some("lost"), window.Some(1980.0)
	return analysis.Closed{Start: wmStart, Servers: []analysis.ServerWindow{sw}, GPUs: []analysis.GPUWindow{gw}}
}

// TestWindowMetricsNameEveryField: every numeric field a window with all
// its values writes has a name on /metrics, so a field added to the
// points without one fails here.
func TestWindowMetricsNameEveryField(t *testing.T) {
	c := fullWindows()
	sf, err := sink.NumericServerFields(c.Servers[0])
	if err != nil {
		t.Fatal(err)
	}
	gf, err := sink.NumericGPUFields(c.GPUs[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("series per server %d, per GPU %d", len(sf), len(gf))
	for m, fs := range map[string][]sink.Field{schema.Server: sf, schema.GPU: gf} {
		for _, f := range fs {
			if _, ok := sink.WindowMetricOf(m, f.Key); !ok {
				t.Errorf("%s field %s has no name on /metrics (sink.WindowMetricOf)", m, f.Key)
			}
		}
	}
}

func gather(t *testing.T, wm *windowMetrics) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(wm)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestWindowMetricsLint: the window gauges pass promlint (what promtool
// check metrics runs), carry the window's start, leave absent values out,
// and a server that leaves takes its series with it.
func TestWindowMetricsLint(t *testing.T) {
	wm := newWindowMetrics()
	c := fullWindows()
	second := c.Servers[0]
	second.Server, second.PowerW = "t", window.Opt[float64]{}
	c.Servers = append(c.Servers, second)
	if err := wm.WriteWindows([]analysis.Closed{c}); err != nil {
		t.Fatal(err)
	}
	mfs := gather(t, wm)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	servers := func(mfs []*dto.MetricFamily, name string) map[string]bool {
		out := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetTimestampMs() != wmStart.UnixMilli() {
					t.Errorf("%s stamped %d, want the window's start", name, m.GetTimestampMs())
				}
				for _, l := range m.GetLabel() {
					if l.GetName() == schema.TagServer {
						out[l.GetValue()] = true
					}
				}
			}
		}
		return out
	}
	if got := servers(mfs, "tpsmon_window_server_power_watts"); !got["s"] || got["t"] {
		t.Errorf("power_watts for servers %v, want s only (t has none)", got)
	}
	if got := servers(mfs, "tpsmon_window_server_state"); len(got) != 2 {
		t.Errorf("state for servers %v", got)
	}
	c.Servers = c.Servers[:1]
	if err := wm.WriteWindows([]analysis.Closed{c}); err != nil {
		t.Fatal(err)
	}
	// A value without a code: named, and its window left out, never served
	// as a wrong number.
	bad := c
	bad.Servers = []analysis.ServerWindow{c.Servers[0]}
	bad.Servers[0].State = "napping"
	if err := wm.WriteWindows([]analysis.Closed{bad}); err == nil || !strings.Contains(err.Error(), `"napping"`) {
		t.Errorf("uncoded state: err %v", err)
	}
	if got := servers(gather(t, wm), "tpsmon_window_server_state"); len(got) != 0 {
		t.Errorf("uncoded state served for %v", got)
	}
	if err := wm.WriteWindows([]analysis.Closed{c}); err != nil {
		t.Fatal(err)
	}
	if got := servers(gather(t, wm), "tpsmon_window_server_state"); len(got) != 1 || !got["s"] {
		t.Errorf("after t left: state for servers %v", got)
	}
}

// fieldRecorder keeps the numeric fields of every window written, by series
// and start.
type fieldRecorder struct {
	mu   sync.Mutex
	seen map[string][]sink.Field
}

func seriesKey(measurement, id string, start time.Time) string {
	return measurement + "/" + id + "/" + start.UTC().Format(time.RFC3339Nano)
}

func (r *fieldRecorder) WriteWindows(cs []analysis.Closed) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		for _, s := range c.Servers {
			fs, err := sink.NumericServerFields(s)
			if err != nil {
				return err
			}
			r.seen[seriesKey(schema.Server, s.Server, s.Start)] = fs
		}
		for _, g := range c.GPUs {
			fs, err := sink.NumericGPUFields(g)
			if err != nil {
				return err
			}
			r.seen[seriesKey(schema.GPU, g.UUID, g.Start)] = fs
		}
	}
	return nil
}

func (r *fieldRecorder) fields(key string) ([]sink.Field, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs, ok := r.seen[key]
	return fs, ok
}

// TestWindowMetricsScrape scrapes /metrics of a running agent once windows
// closed: every field of the last window of the server and of each GPU is
// there with the value the outputs were given, at the window's start.
func TestWindowMetricsScrape(t *testing.T) {
	t.Parallel()
	start := time.Now()
	srv := httptest.NewServer(&vllmsim.Driven{Rate: 200, Start: start.Add(-time.Hour)})
	defer srv.Close()
	cfg := configtest.Private(t)
	if !cfg.HTTP.WindowMetrics {
		t.Fatal("http.window_metrics is off by default")
	}
	cfg.Host = "wm-node"
	cfg.Window, cfg.Grace = time.Second, 200*time.Millisecond
	cfg.GPU.Interval = 100 * time.Millisecond
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: srv.URL + "/metrics",
		GPUs: []string{"auto"}, ScrapeInterval: 100 * time.Millisecond}}
	rec := &fieldRecorder{seen: map[string][]sink.Field{}}
	addr := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- New(cfg, Options{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Outputs: []WindowWriter{rec},
			Listening: func(a net.Addr) { addr <- a },
			OpenGPU:   func() (GPUSampler, error) { return gpusim.Steady{Start: start}, nil }}).Run(ctx)
	}()
	base := "http://" + (<-addr).String()

	// Scrape until a window of the server with tokens is on /metrics.
	var mfs map[string]*dto.MetricFamily
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err = p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if mfs["tpsmon_window_server_tokens"] != nil || time.Now().After(deadline) {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mapValues(mfs)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint on the whole /metrics: %s: %s", p.Metric, p.Text)
	}

	// The scrape's series by window, then each held to the window written.
	type sample struct {
		labels map[string]string
		v      float64
	}
	got := map[string]map[string]sample{} // series key -> metric name (+ one-hot label) -> sample
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "tpsmon_window_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			at := time.UnixMilli(m.GetTimestampMs())
			var key string
			if strings.HasPrefix(name, "tpsmon_window_server_") {
				key = seriesKey(schema.Server, ls[schema.TagServer], at)
			} else {
				key = seriesKey(schema.GPU, ls[schema.TagUUID], at)
			}
			if got[key] == nil {
				got[key] = map[string]sample{}
			}
			got[key][name+"|"+ls[sink.LabelState]+ls[sink.LabelRule]] = sample{ls, m.GetGauge().GetValue()}
		}
	}
	servers, gpus := 0, 0
	for key, series := range got {
		fs, ok := rec.fields(key)
		if !ok {
			t.Errorf("/metrics serves window %s, which no output was given", key)
			continue
		}
		measurement := schema.Server
		if strings.HasPrefix(key, schema.GPU+"/") {
			measurement, gpus = schema.GPU, gpus+1
		} else {
			servers++
		}
		if len(series) != len(fs) {
			t.Errorf("%s: %d metrics on /metrics, %d fields written", key, len(series), len(fs))
		}
		for _, f := range fs {
			pm, _ := sink.WindowMetricOf(measurement, f.Key)
			_, lv := pm.Label()
			s, ok := series[pm.FullName()+"|"+lv]
			if !ok {
				t.Errorf("%s: field %s not on /metrics as %s", key, f.Key, pm.FullName())
				continue
			}
			want := pm.Value(toFloat(f.Value))
			if s.v != want && math.Abs(s.v-want) > 1e-9*math.Abs(want) {
				t.Errorf("%s: %s = %v on /metrics, %v written", key, f.Key, s.v, want)
			}
			if s.labels[schema.TagHost] != "wm-node" {
				t.Errorf("%s: labels %v", key, s.labels)
			}
		}
	}
	// What the simulated GPUs read, in the names' units, and the one-hot
	// state agreeing with state_code.
	for key, series := range got {
		if strings.HasPrefix(key, schema.GPU+"/") {
			for name, want := range map[string]float64{"tpsmon_window_gpu_power_watts|": 300,
				"tpsmon_window_gpu_sm_clock_hertz|": 1800e6, "tpsmon_window_gpu_temperature_celsius|": 60} {
				if s := series[name]; s.v != want {
					t.Errorf("%s: %s = %v, want %v", key, name, s.v, want)
				}
			}
			continue
		}
		code := series["tpsmon_window_server_state_code|"].v
		for st, c := range schema.StateCodes {
			want := 0.0
			if float64(c) == code {
				want = 1
			}
			if s, ok := series["tpsmon_window_server_state|"+st]; !ok || s.v != want {
				t.Errorf("%s: state %s = %v (served %v), state_code %v", key, st, s.v, ok, code)
			}
		}
	}
	if servers != 1 || gpus != 2 {
		t.Errorf("/metrics holds %d server and %d GPU windows, want 1 and 2", servers, gpus)
	}
}

func mapValues(m map[string]*dto.MetricFamily) []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	}
	return math.NaN()
}

// BenchmarkWindowMetrics is one window of S1's node (8 GPUs, 2 servers)
// turned into gauges, and with scrape a gather of them.
func BenchmarkWindowMetrics(b *testing.B) {
	b.Run("write", func(b *testing.B) { benchWindowMetrics(b, false) })
	b.Run("write+scrape", func(b *testing.B) { benchWindowMetrics(b, true) })
}

func benchWindowMetrics(b *testing.B, scrape bool) {
	full := fullWindows()
	c := analysis.Closed{Start: full.Start}
	for i := range 8 {
		g := full.GPUs[0]
		g.Label, g.UUID = string(rune('0'+i)), "GPU-"+string(rune('0'+i))
		c.GPUs = append(c.GPUs, g)
	}
	for _, name := range []string{"a", "b"} {
		s := full.Servers[0]
		s.Server = name
		c.Servers = append(c.Servers, s)
	}
	wm := newWindowMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(wm)
	cs := []analysis.Closed{c}
	b.ReportAllocs()
	for b.Loop() {
		if err := wm.WriteWindows(cs); err != nil {
			b.Fatal(err)
		}
		if !scrape {
			continue
		}
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
