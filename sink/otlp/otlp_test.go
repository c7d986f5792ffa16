package otlp

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/window"
)

// closed is the i-th window of a GPU and two servers, every string field
// of the influx profile set, values that change with i.
func closed(i int) analysis.Closed {
	start := time.Unix(1_700_000_000+10*int64(i), 0).UTC()
	l := 10 * time.Second
	busy := analysis.ServerWindow{State: schema.StateSleeping, ServerWindow: window.ServerWindow{
		Start: start, Length: l, Host: "h", Server: "s", Engine: "vllm", Model: "m", GPUs: []string{"0"},
		Tokens: window.Some(int64(70 + i)), SystemTPS: window.Some(7.25 + float64(i)), Coverage: 1,
		Source: schema.SourceLog, MemUsedBytes: window.Some(int64(40) << 30)}}
	busy.Suspect = window.Some(analysis.RuleGPUIdle)
	busy.SpecFinding = window.Some(analysis.FindingSpecIneffective)
	quiet := analysis.ServerWindow{State: schema.StateOK, ServerWindow: window.ServerWindow{
		Start: start, Length: l, Host: "h", Server: "t", Coverage: 0.5, Source: schema.SourceMetrics}}
	gpu := analysis.GPUWindow{GPUWindow: window.GPUWindow{Start: start, Length: l, Host: "h", Label: "0",
		UUID: "GPU-x", Name: "NVIDIA H100", Server: "s", PowerW: window.Some(300.5 + float64(i)),
		SMClockMHz: window.Some(1410.0), EnergySource: window.Some(schema.EnergyPower),
		Error: window.Some("gpu 0: lost"), Samples: 10}}
	return analysis.Closed{Start: start, GPUs: []analysis.GPUWindow{gpu}, Servers: []analysis.ServerWindow{busy, quiet}}
}

func windows(from, to int) []analysis.Closed {
	var cs []analysis.Closed
	for i := from; i < to; i++ {
		cs = append(cs, closed(i))
	}
	return cs
}

// numericLP is cs in the numeric profile, as the spool holds it.
func numericLP(t *testing.T, cs []analysis.Closed) []byte {
	t.Helper()
	var b bytes.Buffer
	lw := sink.NewLPWriter(&b)
	lw.SetProfile(sink.ProfileNumeric)
	if err := lw.WriteWindows(cs); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// wantPoints reads line protocol as the test's own decoder does: every
// field a data point of its /metrics name, at the line's time.
func wantPoints(t *testing.T, lines []byte) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	dec := lineprotocol.NewDecoderWithBytes(lines)
	for dec.Next() {
		m, _ := dec.Measurement()
		var tags []*commonpb.KeyValue
		for {
			k, v, _ := dec.NextTag()
			if k == nil {
				break
			}
			tags = append(tags, kv(string(k), string(v)))
		}
		type fv struct {
			k string
			v float64
		}
		var fs []fv
		for {
			k, v, _ := dec.NextField()
			if k == nil {
				break
			}
			var x float64
			switch v.Kind() {
			case lineprotocol.Float:
				x = v.FloatV()
			case lineprotocol.Int:
				x = float64(v.IntV())
			default:
				t.Fatalf("%s: field %s is %v in the numeric profile", m, k, v.Kind())
			}
			fs = append(fs, fv{string(k), x})
		}
		ts, err := dec.Time(lineprotocol.Millisecond, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			wm, ok := sink.WindowMetricOf(string(m), f.k)
			if !ok {
				t.Errorf("%s field %s has no name", m, f.k)
				continue
			}
			attrs := tags
			if k, v := wm.Label(); k != "" {
				attrs = append(append([]*commonpb.KeyValue{}, tags...), kv(k, v))
			}
			out[pointKey(wm.FullName(), attrs, uint64(ts.UnixNano()))] = wm.Value(f.v)
		}
	}
	if err := dec.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func kv(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// checkOnce fails unless the receiver holds every point of want exactly
// once, with its value, and nothing else.
func checkOnce(t *testing.T, r *receiver, want map[string]float64) {
	t.Helper()
	got, bad := r.got()
	for _, b := range bad {
		t.Errorf("receiver: %s", b)
	}
	for k, w := range want {
		vs := got[k]
		switch {
		case len(vs) == 0:
			t.Errorf("missing %s", k)
		case len(vs) > 1:
			t.Errorf("%s arrived %d times", k, len(vs))
		case vs[0] != w && math.Abs(vs[0]-w) > 1e-12*math.Abs(w):
			t.Errorf("%s = %v, want %v", k, vs[0], w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s", k)
		}
	}
}

func newWriter(t *testing.T, endpoint string, cfg Config) *Writer {
	t.Helper()
	cfg.Endpoint = endpoint
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// TestExportMatchesLineProtocol: the receiver gets every field of a
// window as a gauge of its /metrics name, with the point's tags (and a
// one-hot field's label) as attributes, the window's start as its time
// and the line protocol's value in the name's unit; the configured
// headers, gzip or not.
func TestExportMatchesLineProtocol(t *testing.T) {
	for _, gz := range []bool{false, true} {
		r := newReceiver(t)
		w := newWriter(t, r.srv.URL, Config{GZip: gz, Headers: []string{"authorization: Bearer t0ken", "X-Scope-OrgID: a"},
			UserAgent: "tpsmon/test"})
		lines := numericLP(t, windows(0, 2))
		if err := w.Write(context.Background(), lines); err != nil {
			t.Fatal(err)
		}
		want := wantPoints(t, lines)
		checkOnce(t, r, want)
		// The names, attributes and units pinned by hand, not by the
		// table both sides read.
		start := uint64(time.Unix(1_700_000_000, 0).UnixNano())
		srv := []*commonpb.KeyValue{kv("engine", "vllm"), kv("gpus", "0"), kv("host", "h"), kv("model", "m"), kv("server", "s")}
		gpu := []*commonpb.KeyValue{kv("gpu", "0"), kv("host", "h"), kv("name", "NVIDIA H100"), kv("server", "s"), kv("uuid", "GPU-x")}
		pinned := map[string]float64{
			pointKey("tpsmon_window_server_system_tokens_per_second", srv, start):                          7.25,
			pointKey("tpsmon_window_server_tokens", srv, start):                                            70,
			pointKey("tpsmon_window_server_memory_used_bytes", srv, start):                                 40 << 30,
			pointKey("tpsmon_window_server_state_code", srv, start):                                        float64(schema.StateCodes[schema.StateSleeping]),
			pointKey("tpsmon_window_server_state", append(srv, kv("state", schema.StateSleeping)), start):  1,
			pointKey("tpsmon_window_server_state", append(srv, kv("state", schema.StateOK)), start):        0,
			pointKey("tpsmon_window_server_suspect", append(srv, kv("rule", analysis.RuleGPUIdle)), start): 1,
			pointKey("tpsmon_window_server_source_code", srv, start):                                       float64(schema.SourceCodes[schema.SourceLog]),
			pointKey("tpsmon_window_gpu_power_watts", gpu, start):                                          300.5,
			pointKey("tpsmon_window_gpu_sm_clock_hertz", gpu, start):                                       1410e6,
			pointKey("tpsmon_window_gpu_read_error", gpu, start):                                           1,
			pointKey("tpsmon_window_gpu_window_seconds", gpu, start):                                       10,
		}
		got, _ := r.got()
		for k, v := range pinned {
			if g := got[k]; len(g) != 1 || g[0] != v {
				t.Errorf("gzip %v: %s = %v, want [%v]", gz, k, g, v)
			}
		}
		if n, f := len(want), countFields(lines); n != f || f < 2*30 {
			t.Errorf("%d points for %d fields", n, f)
		}
		if r.resource["service.name"] != "tpsmon" || len(r.resource) != 1 {
			t.Errorf("resource %v, want service.name=tpsmon only", r.resource)
		}
		if h, o := r.header.Get("Authorization"), r.header.Get("X-Scope-Orgid"); h != "Bearer t0ken" || o != "a" {
			t.Errorf("Authorization %q, X-Scope-OrgID %q", h, o)
		}
		if ua := r.header.Get("User-Agent"); ua != "tpsmon/test" {
			t.Errorf("User-Agent %q", ua)
		}
		if ce := r.header.Get("Content-Encoding"); gz != (ce == "gzip") || gz != (r.wire < r.raw) {
			t.Errorf("gzip %v: Content-Encoding %q, %d bytes sent of %d", gz, ce, r.wire, r.raw)
		}
		t.Logf("gzip %v: %d points of 2 windows in %d request", gz, len(want), r.requests)
	}
}

// TestClassify: what the Sender is told for each answer of the receiver.
func TestClassify(t *testing.T) {
	for _, c := range []struct {
		status         int
		rejected       int64
		retry, content bool
		ok             bool
	}{
		{status: 200, ok: true},
		{status: 200, rejected: 3, content: true},
		{status: 400, content: true},
		{status: 401, retry: true},
		{status: 403, retry: true},
		{status: 404, retry: true},
		{status: 409},
		{status: 413},
		{status: 429, retry: true},
		{status: 500, retry: true},
		{status: 502, retry: true},
		{status: 503, retry: true},
		{status: 504, retry: true},
	} {
		r := newReceiver(t)
		r.answer = func(*metricpb.MetricsData) (int, int64) { return c.status, c.rejected }
		w := newWriter(t, r.srv.URL+"/", Config{})
		err := w.Write(context.Background(), numericLP(t, windows(0, 1)))
		if c.ok {
			if err != nil {
				t.Errorf("%d: %v", c.status, err)
			}
			continue
		}
		var we *sink.WriteError
		if !errors.As(err, &we) {
			t.Errorf("%d: %v is no WriteError", c.status, err)
			continue
		}
		if we.Status != c.status || we.Retry != c.retry || we.Content != c.content {
			t.Errorf("%d: status %d retry %v content %v, want retry %v content %v (%v)", c.status, we.Status, we.Retry, we.Content, c.retry, c.content, err)
		}
		if c.status != 200 && we.After != time.Second {
			t.Errorf("%d: Retry-After %v, want 1s", c.status, we.After)
		}
		if !strings.HasPrefix(err.Error(), "otlp export: HTTP ") {
			t.Errorf("%d: message %q", c.status, err)
		}
	}
	// Nobody listening: a transport error, retried.
	r := newReceiver(t)
	url := r.srv.URL
	r.srv.Close()
	err := newWriter(t, url, Config{}).Write(context.Background(), numericLP(t, windows(0, 1)))
	var we *sink.WriteError
	if !errors.As(err, &we) || !we.Retry || we.Status != 0 || we.Content {
		t.Errorf("receiver down: %#v", err)
	}
}

// TestProbe: an empty export reaches the receiver and stores nothing; a
// refused header shows as the receiver's 401.
func TestProbe(t *testing.T) {
	r := newReceiver(t)
	w := newWriter(t, r.srv.URL, Config{Headers: []string{"Authorization: Bearer good"}})
	if err := w.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, bad := r.got(); len(got) != 0 || len(bad) != 0 || r.requests != 1 {
		t.Errorf("probe stored %v (%v), %d requests", got, bad, r.requests)
	}
	r.answer = func(*metricpb.MetricsData) (int, int64) { return http.StatusUnauthorized, 0 }
	var we *sink.WriteError
	if err := w.Probe(context.Background()); !errors.As(err, &we) || we.Status != http.StatusUnauthorized {
		t.Errorf("probe refused: %v", err)
	}
}

// spooled is a spool with its Sender and the SpoolWriter the agent
// gives the pipeline, in dir.
type spooled struct {
	sp *spool.Spool
	s  *sink.Sender
	sw *sink.SpoolWriter
}

func openSpooled(t *testing.T, dir string, w sink.Writer) *spooled {
	t.Helper()
	sp, err := spool.Open(spool.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s := &sink.Sender{Spool: sp, W: w, Name: "OTLP receiver"}
	sw := sink.NewSpoolWriter(sp, s)
	sw.SetProfile(sink.ProfileNumeric)
	return &spooled{sp, s, sw}
}

// TestOutageLosesNothing: the receiver answers 503, then is not there at
// all, while windows keep closing; every flush fails and keeps the spool.
// Back, it gets every window exactly once, in order, and the spool is
// empty.
func TestOutageLosesNothing(t *testing.T) {
	r := newReceiver(t)
	down := true
	r.answer = func(*metricpb.MetricsData) (int, int64) {
		if down {
			return http.StatusServiceUnavailable, 0
		}
		return 0, 0
	}
	addr := r.srv.Listener.Addr().String()
	w := newWriter(t, r.srv.URL, Config{GZip: true})
	sp := openSpooled(t, t.TempDir(), w)
	defer sp.sp.Close()
	ctx := context.Background()
	for i := range 3 {
		if err := sp.sw.WriteWindows(windows(i, i+1)); err != nil {
			t.Fatal(err)
		}
		var we *sink.WriteError
		if err := sp.s.Flush(ctx); !errors.As(err, &we) || we.Status != http.StatusServiceUnavailable || !we.Retry {
			t.Fatalf("flush while answering 503: %v", err)
		}
	}
	r.srv.Close() // now nobody listens
	for i := 3; i < 6; i++ {
		if err := sp.sw.WriteWindows(windows(i, i+1)); err != nil {
			t.Fatal(err)
		}
		var we *sink.WriteError
		if err := sp.s.Flush(ctx); !errors.As(err, &we) || we.Status != 0 || !we.Retry {
			t.Fatalf("flush with the receiver down: %v", err)
		}
	}
	if st := sp.sp.Stats(); st.Points != 6*3 || st.Dropped != 0 || st.Quarantined != 0 {
		t.Fatalf("spool during the outage: %+v", st)
	}
	down = false
	r.restart(t, addr)
	if err := sp.s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, r, wantPoints(t, numericLP(t, windows(0, 6))))
	if st := sp.sp.Stats(); st.Points != 0 || st.Quarantined != 0 {
		t.Errorf("spool after: %+v", st)
	}
	if h := sp.s.Health(); h.Sent != 18 || h.LastError != "" {
		t.Errorf("health after: %+v", h)
	}
}

// TestRestartKeepsTheSpool: windows spooled while the receiver was down
// survive the Sender's and the spool's end; a new one on the same
// directory delivers them, once.
func TestRestartKeepsTheSpool(t *testing.T) {
	r := newReceiver(t)
	up := false
	r.answer = func(*metricpb.MetricsData) (int, int64) {
		if !up {
			return http.StatusBadGateway, 0
		}
		return 0, 0
	}
	dir := t.TempDir()
	first := openSpooled(t, dir, newWriter(t, r.srv.URL, Config{}))
	if err := first.sw.WriteWindows(windows(0, 4)); err != nil {
		t.Fatal(err)
	}
	// Run, as the agent does, until stopped, then the agent's last flush.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { first.s.Run(ctx); close(done) }()
	first.s.Notify()
	cancel()
	<-done
	if err := first.s.Flush(context.Background()); err == nil {
		t.Fatal("flush succeeded with the receiver answering 502")
	}
	if err := first.sp.Close(); err != nil {
		t.Fatal(err)
	}
	up = true
	second := openSpooled(t, dir, newWriter(t, r.srv.URL, Config{}))
	defer second.sp.Close()
	if st := second.sp.Stats(); st.Points != 12 {
		t.Fatalf("reopened spool holds %d points, want 12", st.Points)
	}
	if err := second.sw.WriteWindows(windows(4, 5)); err != nil {
		t.Fatal(err)
	}
	if err := second.s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, r, wantPoints(t, numericLP(t, windows(0, 5))))
}

// TestBadLinesQuarantined: a spooled line the writer cannot read, or a
// point the receiver refuses (400, or a partial success that rejects
// it), goes to quarantine with a reason that names it; every other point
// arrives once.
func TestBadLinesQuarantined(t *testing.T) {
	good := numericLP(t, windows(0, 2))
	refused := numericLP(t, []analysis.Closed{func() analysis.Closed {
		c := closed(9)
		c.GPUs = nil
		c.Servers = c.Servers[:1]
		c.Servers[0].Server = "refused"
		return c
	}()})
	cut := bytes.Index(good, []byte("\ntpsmon_server")) + 1 // after the first window's GPU line
	for _, c := range []struct {
		name   string
		bad    []byte
		answer func(*metricpb.MetricsData) (int, int64)
		reason string
	}{
		{name: "not line protocol", bad: []byte("tpsmon_server,host=h state_code=\n"), reason: "point 1"},
		{name: "string field", bad: []byte("tpsmon_server,host=h,server=s state=\"ok\" 1700000000000\n"), reason: "field state is a string"},
		{name: "other measurement", bad: []byte("cpu,host=h v=1 1700000000000\n"), reason: `measurement "cpu"`},
		{name: "no timestamp", bad: []byte("tpsmon_gpu,host=h,uuid=x power_w=1\n"), reason: "no timestamp"},
		{name: "tag not UTF-8", bad: []byte("tpsmon_gpu,host=h\xff,uuid=x power_w=1 1700000000000\n"), reason: "invalid utf-8"},
		{name: "400", bad: refused, reason: "HTTP 400",
			answer: func(req *metricpb.MetricsData) (int, int64) {
				if hasServer(req, "refused") {
					return http.StatusBadRequest, 0
				}
				return 0, 0
			}},
		{name: "partial success", bad: refused, reason: "partial success",
			answer: func(req *metricpb.MetricsData) (int, int64) {
				if hasServer(req, "refused") {
					return 0, 5
				}
				return 0, 0
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newReceiver(t)
			r.answer = c.answer
			dir := t.TempDir()
			sp := openSpooled(t, dir, newWriter(t, r.srv.URL, Config{}))
			defer sp.sp.Close()
			batch := append(append(append([]byte{}, good[:cut]...), c.bad...), good[cut:]...)
			if err := sp.sp.Append(batch); err != nil {
				t.Fatal(err)
			}
			if err := sp.s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkOnce(t, r, wantPoints(t, good))
			st := sp.sp.Stats()
			if st.Points != 0 || st.Quarantined != uint64(bytes.Count(c.bad, []byte("\n"))) {
				t.Errorf("spool after: %+v", st)
			}
			q, err := os.ReadFile(filepath.Join(dir, "quarantine", "rejected.lp"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(q, c.bad) || !strings.Contains(string(q), c.reason) {
				t.Errorf("quarantine holds:\n%s\nwant the line and %q", q, c.reason)
			}
			if h := sp.s.Health(); h.Refused != st.Quarantined {
				t.Errorf("refused %d, quarantined %d", h.Refused, st.Quarantined)
			}
		})
	}
}

// TestDecodeLeavesNothingOut: every field of every line is a data point.
func TestDecodeLeavesNothingOut(t *testing.T) {
	lines := numericLP(t, windows(0, 3))
	rm, n, err := Decode(lines)
	if err != nil {
		t.Fatal(err)
	}
	if n != 9 {
		t.Errorf("%d points, want 9", n)
	}
	fields := countFields(lines)
	dps := 0
	for _, m := range rm.GetScopeMetrics()[0].GetMetrics() {
		dps += len(m.GetGauge().GetDataPoints())
	}
	if dps != fields || fields < 3*30 {
		t.Errorf("%d data points of %d fields", dps, fields)
	}
}

// countFields counts the fields of every line.
func countFields(lines []byte) int {
	n := 0
	dec := lineprotocol.NewDecoderWithBytes(lines)
	for dec.Next() {
		for k, _, _ := dec.NextField(); k != nil; k, _, _ = dec.NextField() {
			n++
		}
	}
	return n
}
