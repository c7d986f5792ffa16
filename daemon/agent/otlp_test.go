package agent

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/otlp"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// otlpReceiver keeps the gauges' points it is sent, by series and time,
// while up; down, it answers 503.
type otlpReceiver struct {
	down   atomic.Bool
	mu     sync.Mutex
	points map[string][]float64 // name{attrs}@unix seconds
	failed int
	tenant map[string]int // requests by X-Tenant
}

func otlpKey(name string, attrs map[string]string, sec int64) string {
	kv := make([]string, 0, len(attrs))
	for k, v := range attrs {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return fmt.Sprintf("%s{%s}@%d", name, strings.Join(kv, ","), sec)
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	if r.down.Load() {
		r.mu.Lock()
		r.failed++
		r.mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	var body io.Reader = hr.Body
	if hr.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(hr.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, _ := io.ReadAll(body)
	var req metricpb.MetricsData
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tenant != nil {
		r.tenant[hr.Header.Get("X-Tenant")]++
	}
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				for _, dp := range m.GetGauge().GetDataPoints() {
					attrs := map[string]string{}
					for _, a := range dp.GetAttributes() {
						attrs[a.GetKey()] = a.GetValue().GetStringValue()
					}
					k := otlpKey(m.GetName(), attrs, int64(dp.GetTimeUnixNano()/1e9))
					r.points[k] = append(r.points[k], dp.GetAsDouble())
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (r *otlpReceiver) get(k string) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.points[k])
}

// TestOTLPBesideInfluxDB: one daemon writes InfluxDB and pushes OTLP;
// the OTLP receiver answers 503 for the first seconds while windows
// close. At the end every window InfluxDB holds arrived over OTLP
// exactly once, at its start, every numeric field of the point under its
// /metrics name with its value, the state as state_code and the one-hot
// state (a batch in flight at the stop finishes, never sent twice); the
// InfluxDB path never waited on the OTLP outage.
func TestOTLPBesideInfluxDB(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "otlp")
	rcv := &otlpReceiver{points: map[string][]float64{}}
	rcv.down.Store(true)
	ots := httptest.NewServer(rcv)
	defer ots.Close()
	start := time.Now()
	src := &vllmsim.Driven{Rate: 100, Start: start, ResetAt: start.Add(time.Hour)}
	vllm := httptest.NewServer(src)
	defer vllm.Close()

	cfg := configtest.Private(t)
	cfg.Host = "otlp-node"
	cfg.Window, cfg.Grace = time.Second, 200*time.Millisecond
	cfg.GPU.Interval = 200 * time.Millisecond
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: vllm.URL, GPUs: []string{"auto"}, ScrapeInterval: 100 * time.Millisecond}}
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db
	cfg.Sink.OTLP.Endpoint = ots.URL
	cfg.Sink.OTLP.Headers = []string{"Authorization: Bearer s3cret"}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var logs strings.Builder
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), nil))
	go func() {
		done <- New(cfg, Options{Log: log, OpenGPU: func() (GPUSampler, error) { return gpusim.Steady{Start: start}, nil }}).Run(ctx)
	}()
	// Down until InfluxDB holds three windows: they closed during the
	// OTLP outage and InfluxDB took them meanwhile.
	inInflux := func() map[int64]bool { got, _ := influxtest.WindowStarts(t, base, db, "llm"); return got }
	deadline := time.Now().Add(20 * time.Second)
	for len(inInflux()) < 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	outage := inInflux()
	rcv.down.Store(false)
	// Up: stopped once the receiver holds every window InfluxDB holds,
	// and two more.
	for time.Now().Before(deadline) {
		rows := influxRows(t, base, db)
		arrived := 0
		for _, r := range rows {
			k := otlpKey("tpsmon_window_server_window_seconds", serverAttrs(r), int64(influxtest.Num(t, r["time"])))
			if len(rcv.get(k)) > 0 {
				arrived++
			}
		}
		if arrived == len(rows) && len(rows) >= len(outage)+2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(outage) < 3 || rcv.failed == 0 {
		t.Fatalf("the outage held %d windows, %d refused exports", len(outage), rcv.failed)
	}

	rows := influxRows(t, base, db)
	compared, twice, last := 0, map[int64]bool{}, int64(0)
	for _, r := range rows {
		sec := int64(influxtest.Num(t, r["time"]))
		last = max(last, sec)
		attrs := serverAttrs(r)
		check := func(field string, want float64, extra ...string) {
			wm, ok := sink.WindowMetricOf(schema.Server, field)
			if !ok {
				t.Errorf("field %s has no name", field)
				return
			}
			a := attrs
			if len(extra) == 2 {
				a = map[string]string{extra[0]: extra[1]}
				for k, v := range attrs {
					a[k] = v
				}
			}
			got := rcv.get(otlpKey(wm.FullName(), a, sec))
			want = wm.Value(want)
			if len(got) == 0 {
				t.Errorf("window %d: %s never arrived over OTLP", sec, wm.FullName())
				return
			}
			if len(got) > 1 {
				// A batch sent again: its answer lost at the stop,
				// which the Sender's Drain is to prevent.
				t.Errorf("window %d: %s arrived %d times over OTLP: %v", sec, wm.FullName(), len(got), got)
				twice[sec] = true
			}
			for _, g := range got {
				if g != want && math.Abs(g-want) > 1e-9*math.Abs(want) {
					t.Errorf("window %d: %s = %v over OTLP, %v in InfluxDB", sec, wm.FullName(), got, want)
					return
				}
			}
			compared++
		}
		for f, v := range r {
			if f == "time" || slices.Contains(schema.ServerTags, f) || v == nil {
				continue
			}
			switch x := v.(type) {
			case json.Number:
				check(f, influxtest.Num(t, x))
			case string:
				if f == schema.FieldState {
					check(schema.FieldStateCode, float64(schema.StateCodes[x]))
					check(schema.NumericField(schema.FieldState, x), 1, sink.LabelState, x)
				}
			}
		}
	}
	t.Logf("%d windows in InfluxDB (%d closed during the OTLP outage, %d exports refused), %d values equal over OTLP; sent twice (same values): %v, the last window %d",
		len(rows), len(outage), rcv.failed, compared, slices.Sorted(maps.Keys(twice)), last)
	if compared < len(rows)*10 {
		t.Errorf("only %d values compared for %d windows", compared, len(rows))
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "s3cret") {
		t.Error("the log shows a header's value")
	}
}

// TestReloadOTLPHeaders: a reload with new headers sends the next
// exports with them; one with a header HTTP cannot carry is rejected,
// naming the key, and the running ones stay.
func TestReloadOTLPHeaders(t *testing.T) {
	t.Parallel()
	rcv := &otlpReceiver{points: map[string][]float64{}, tenant: map[string]int{}}
	ots := httptest.NewServer(rcv)
	defer ots.Close()
	vllm := httptest.NewServer(&vllmsim.Driven{Rate: 100, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	defer vllm.Close()
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace, cfg.GPU.Backend = time.Second, 200*time.Millisecond, "none"
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: vllm.URL, ScrapeInterval: 100 * time.Millisecond}}
	cfg.Sink.File.Path = config.NoFileSink
	cfg.Sink.OTLP.Endpoint = ots.URL
	cfg.Sink.OTLP.Headers = []string{"X-Tenant: a"}
	next := *cfg
	var mu sync.Mutex
	load := func() (*config.Config, error) { mu.Lock(); defer mu.Unlock(); c := next; return &c, nil }
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	a := New(cfg, Options{Log: slog.New(slog.DiscardHandler), Reload: reload, Load: load})
	go func() { done <- a.Run(ctx) }()
	requests := func(tenant string) int { rcv.mu.Lock(); defer rcv.mu.Unlock(); return rcv.tenant[tenant] }
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s", what)
			}
		}
	}
	waitFor("export with X-Tenant a", func() bool { return requests("a") > 0 })
	mu.Lock()
	next.Sink.OTLP.Headers = []string{"X-Tenant: b"}
	mu.Unlock()
	reload <- syscall.SIGHUP
	waitFor("export with X-Tenant b after the reload", func() bool { return requests("b") > 0 })
	mu.Lock()
	next.Sink.OTLP.Headers = []string{"X-Tenant b"}
	mu.Unlock()
	reload <- syscall.SIGHUP
	waitFor("rejected reload", func() bool { return strings.Contains(a.health.lastReloadError(), "sink.otlp") })
	before := requests("b")
	waitFor("export with X-Tenant b after the rejected reload", func() bool { return requests("b") > before })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	t.Logf("exports: %v; the rejected reload: %s", rcv.tenant, a.health.lastReloadError())
}

func influxRows(t *testing.T, base, db string) []map[string]any {
	series := influxtest.Query(t, base, db, `SELECT * FROM tpsmon_server WHERE "server" = 'llm'`)
	if len(series) == 0 {
		return nil
	}
	return series[0].Rows()
}

// serverAttrs are a tpsmon_server row's tags, as OTLP attributes.
func serverAttrs(r map[string]any) map[string]string {
	attrs := map[string]string{}
	for _, tag := range schema.ServerTags {
		if v, ok := r[tag].(string); ok && v != "" {
			attrs[tag] = v
		}
	}
	return attrs
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestWindowMetricsMatchOTLP: for the same window, with every field
// present, /metrics and the OTLP push give the same series (name and
// labels, an empty label being none), the same timestamps and values.
func TestWindowMetricsMatchOTLP(t *testing.T) {
	c := fullWindows()
	wm := newWindowMetrics()
	if err := wm.WriteWindows([]analysis.Closed{c}); err != nil {
		t.Fatal(err)
	}
	prom := map[string]float64{}
	for _, mf := range gather(t, wm) {
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				if l.GetValue() != "" {
					ls[l.GetName()] = l.GetValue()
				}
			}
			prom[otlpKey(mf.GetName(), ls, m.GetTimestampMs()/1000)] = m.GetGauge().GetValue()
		}
	}
	var lp strings.Builder
	lw := sink.NewLPWriter(&lp)
	lw.SetProfile(sink.ProfileNumeric)
	if err := lw.WriteWindows([]analysis.Closed{c}); err != nil {
		t.Fatal(err)
	}
	rm, _, err := otlp.Decode([]byte(lp.String()))
	if err != nil {
		t.Fatal(err)
	}
	pushed := map[string]float64{}
	for _, m := range rm.GetScopeMetrics()[0].GetMetrics() {
		for _, dp := range m.GetGauge().GetDataPoints() {
			ls := map[string]string{}
			for _, kv := range dp.GetAttributes() {
				ls[kv.GetKey()] = kv.GetValue().GetStringValue()
			}
			pushed[otlpKey(m.GetName(), ls, time.Unix(0, int64(dp.GetTimeUnixNano())).Unix())] = dp.GetAsDouble()
		}
	}
	for k, v := range prom {
		if p, ok := pushed[k]; !ok {
			t.Errorf("/metrics has %s, OTLP not", k)
		} else if p != v {
			t.Errorf("%s: %v on /metrics, %v over OTLP", k, v, p)
		}
	}
	for k := range pushed {
		if _, ok := prom[k]; !ok {
			t.Errorf("OTLP has %s, /metrics not", k)
		}
	}
	if len(prom) < 100 {
		t.Errorf("only %d series compared", len(prom))
	}
	t.Logf("%d series equal on /metrics and over OTLP", len(prom))
}
