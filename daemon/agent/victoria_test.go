package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/testkit/loopback"
	"github.com/tpsmon/tpsmon/testkit/victoriatest"
)

// The outputs for Prometheus-model stores, verified on a real one: one
// daemon run writes its windows through the spool and sender to
// VictoriaMetrics (sink.influx, numeric profile, on its InfluxDB
// /api/v2/write) and, as two more outputs of the same run, to InfluxDB 1.8
// in the numeric and the default profile; VictoriaMetrics also scrapes the
// daemon's /metrics. Each path's windows, read back through the Prometheus
// query API, are held to what InfluxDB holds for the same window, field by
// field. A path for another protocol sends to r.vm in runOnVictoria and
// adds its reader (storedWindows by window) and a compareWindows call.

// victoriaScrape is how often VictoriaMetrics scrapes /metrics: several
// times a window, so that every window is scraped.
const victoriaScrape = 200 * time.Millisecond

// wkey names a window of a server (its name) or a GPU (its UUID) by its
// start.
type wkey struct {
	measurement, id string
	start           int64 // Unix ms
}

func (k wkey) String() string {
	return fmt.Sprintf("%s %s %s", k.measurement, k.id, time.UnixMilli(k.start).UTC().Format("15:04:05.000"))
}

// storedWindow is a window as a store holds it: its tags (non-empty),
// numeric fields in the field's unit, string fields (InfluxDB's default
// profile), and how many more samples than one a field has there.
type storedWindow struct {
	tags    map[string]string
	fields  map[string]float64
	strings map[string]string
	extra   map[string]int
}

type storedWindows map[wkey]*storedWindow

// at returns the window of measurement with tags at start, made on first
// use.
func (ws storedWindows) at(measurement string, tags map[string]string, start int64) *storedWindow {
	id := tags[schema.TagServer]
	if measurement == schema.GPU {
		id = tags[schema.TagUUID]
	}
	k := wkey{measurement, id, start}
	w := ws[k]
	if w == nil {
		w = &storedWindow{tags: tags, fields: map[string]float64{}, strings: map[string]string{}, extra: map[string]int{}}
		ws[k] = w
	}
	return w
}

// influxWindows reads every window point of db.
func influxWindows(t *testing.T, base, db string) storedWindows {
	t.Helper()
	out := storedWindows{}
	for m, tagKeys := range map[string][]string{schema.Server: schema.ServerTags, schema.GPU: schema.GPUTags} {
		series := influxtest.QueryEpoch(t, base, db, "SELECT * FROM "+m, "ms")
		if len(series) == 0 {
			continue
		}
		for _, r := range series[0].Rows() {
			tags := map[string]string{}
			for _, k := range tagKeys {
				if s, _ := r[k].(string); s != "" {
					tags[k] = s
				}
			}
			w := out.at(m, tags, int64(influxtest.Num(t, r["time"])))
			for col, v := range r {
				if col == "time" || slices.Contains(tagKeys, col) || v == nil {
					continue
				}
				if n, ok := influxql.Num(v); ok {
					w.fields[col] = n
				} else if s, ok := v.(string); ok {
					w.strings[col] = s
				} else {
					t.Fatalf("%s.%s = %v (%T)", m, col, v, v)
				}
			}
		}
	}
	return out
}

// vmLineWindows reads the line protocol VictoriaMetrics took: series
// <measurement>_<field>, the tags as labels. Every sample counts: a
// window sent twice shows as extra samples.
func vmLineWindows(t *testing.T, vm *victoriatest.Server, at time.Time, lookback time.Duration) storedWindows {
	t.Helper()
	out := storedWindows{}
	// job="": not a scraped series.
	for _, s := range vm.Raw(t, `{__name__=~"tpsmon_(server|gpu)_.+",job=""}`, at, lookback) {
		name := s.Labels["__name__"]
		tags := maps.Clone(s.Labels)
		delete(tags, "__name__")
		m, field := schema.GPU, strings.TrimPrefix(name, schema.GPU+"_")
		if f, ok := strings.CutPrefix(name, schema.Server+"_"); ok {
			m, field = schema.Server, f
		}
		for _, smp := range s.Samples {
			w := out.at(m, tags, smp.T.UnixMilli())
			if _, dup := w.fields[field]; dup {
				w.extra[field]++
				continue
			}
			w.fields[field] = smp.V
		}
	}
	return out
}

// vmScrapeWindows reads the window gauges VictoriaMetrics scraped from
// /metrics.
func vmScrapeWindows(t *testing.T, vm *victoriatest.Server, at time.Time, lookback time.Duration) storedWindows {
	t.Helper()
	return vmGaugeWindows(t, vm, `{__name__=~"tpsmon_window_.+",job="tpsmon"}`, []string{"job", "instance"}, at, lookback)
}

// vmGaugeWindows reads the window gauges selector matches (as /metrics
// names them: promNames), back in their fields' units, without the
// labels the way in added (drop). The same window read again is the same
// sample; a stale marker (a series gone from the next window) is no
// sample. The scrape reads them so; so can a push that uses the same
// names (OTLP).
func vmGaugeWindows(t *testing.T, vm *victoriatest.Server, selector string, drop []string, at time.Time, lookback time.Duration) storedWindows {
	t.Helper()
	type named struct {
		measurement, field string
		scale              float64
	}
	byName := map[string]named{}
	for m, fields := range promNames {
		for f, pm := range fields {
			byName[promName(m, pm)+"|"+pm.label] = named{m, f, pm.scale}
		}
	}
	out := storedWindows{}
	for _, s := range vm.Raw(t, selector, at, lookback) {
		tags := maps.Clone(s.Labels)
		oneHot := tags[labelState] + tags[labelRule]
		for _, l := range append([]string{"__name__", labelState, labelRule}, drop...) {
			delete(tags, l)
		}
		n, ok := byName[s.Labels["__name__"]+"|"+oneHot]
		if !ok {
			t.Errorf("scraped %v: no field has that name", s.Labels)
			continue
		}
		for _, smp := range s.Samples {
			if math.IsNaN(smp.V) {
				continue
			}
			v := smp.V
			if n.scale != 0 {
				v /= n.scale
			}
			w := out.at(n.measurement, tags, smp.T.UnixMilli())
			if old, seen := w.fields[n.field]; seen && old != v {
				t.Errorf("%s: scraped %s as %v and %v", s.Labels, n.field, old, v)
			}
			w.fields[n.field] = v
		}
	}
	return out
}

// pathStats is how a path's windows compared with InfluxDB's.
type pathStats struct {
	windows, fields, exact, close int
	worst                         float64
}

// compareWindows holds every window of got to the same window of want:
// the same tags, every field there once, equal to the store's precision,
// no field more. The windows of want that must holds must all be in got.
func compareWindows(t *testing.T, path string, want, got storedWindows, must func(wkey) bool) pathStats {
	t.Helper()
	var st pathStats
	for k, g := range got {
		w, ok := want[k]
		if !ok {
			t.Errorf("%s: window %s, which InfluxDB does not hold", path, k)
			continue
		}
		st.windows++
		if !maps.Equal(g.tags, w.tags) {
			t.Errorf("%s: window %s tagged %v, InfluxDB %v", path, k, g.tags, w.tags)
		}
		for f, wv := range w.fields {
			gv, ok := g.fields[f]
			if !ok {
				t.Errorf("%s: window %s has no %s (InfluxDB %v)", path, k, f, wv)
				continue
			}
			st.fields++
			switch d := victoriatest.RelDiff(gv, wv); {
			case d == 0:
				st.exact++
			case d <= victoriatest.Precision:
				st.close++
				st.worst = max(st.worst, d)
			default:
				t.Errorf("%s: window %s: %s = %v, InfluxDB %v", path, k, f, gv, wv)
			}
		}
		for f := range g.fields {
			if _, ok := w.fields[f]; !ok {
				t.Errorf("%s: window %s has %s, which InfluxDB does not", path, k, f)
			}
		}
		for f, n := range g.extra {
			t.Errorf("%s: window %s: %s stored %d times", path, k, f, n+1)
		}
	}
	if must != nil {
		for k := range want {
			if must(k) && got[k] == nil {
				t.Errorf("%s: window %s missing", path, k)
			}
		}
	}
	t.Logf("%-13s %3d windows of %3d, %4d fields read back: %4d equal, %4d within %g (worst %.2g)",
		path, st.windows, len(want), st.fields, st.exact, st.close, victoriatest.Precision, st.worst)
	return st
}

// checkCodes holds the numeric codes of each window got to the strings
// InfluxDB's default profile holds for it (def): state_code and the
// one-hot state, source_code, energy_source_code.
func checkCodes(t *testing.T, path string, def, got storedWindows) int {
	t.Helper()
	n := 0
	for k, g := range got {
		d := def[k]
		if d == nil {
			t.Errorf("%s: window %s not in the default profile's database", path, k)
			continue
		}
		codes := map[string]map[string]int64{schema.FieldSource: schema.SourceCodes, schema.FieldEnergySource: schema.EnergySourceCodes}
		for f, v := range d.strings {
			if f == schema.FieldState {
				if c := schema.StateCodes[v]; g.fields[schema.FieldStateCode] != float64(c) {
					t.Errorf("%s: window %s: state %s, state_code %v", path, k, v, g.fields[schema.FieldStateCode])
				}
				for _, s := range schema.States {
					if on := g.fields[schema.NumericField(schema.FieldState, s)] == 1; on != (s == v) {
						t.Errorf("%s: window %s: state %s, state_%s %v", path, k, v, s, on)
					}
				}
				n++
			}
			if table, ok := codes[f]; ok {
				if c := table[v]; g.fields[f+"_code"] != float64(c) {
					t.Errorf("%s: window %s: %s %s, code %v", path, k, f, v, g.fields[f+"_code"])
				}
			}
		}
	}
	return n
}

// victoriaRun is one daemon run: its windows in VictoriaMetrics (line
// protocol and scraped /metrics) and in InfluxDB (numeric and default
// profile).
type victoriaRun struct {
	vm                   *victoriatest.Server
	influx, numDB, defDB string
	from                 time.Time
	// scrapedTo is the start of the last window scraped before the
	// stop: the window closed at the stop has no scrape after it.
	scrapedTo int64
}

// all is every window.
func all(wkey) bool { return true }

// waitScraped waits, a few windows at most, until VictoriaMetrics has
// scraped the newest server window it took by line protocol, and returns
// that window's start.
func waitScraped(t *testing.T, vm *victoriatest.Server) int64 {
	t.Helper()
	newest := func(selector string) int64 {
		var ts int64
		for _, s := range vm.Raw(t, selector, time.Now().Add(time.Minute), time.Hour) {
			for _, smp := range s.Samples {
				if !math.IsNaN(smp.V) {
					ts = max(ts, smp.T.UnixMilli())
				}
			}
		}
		return ts
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(victoriaScrape / 2) {
		lp := newest(`tpsmon_server_window_s{job=""}`)
		sc := newest(`tpsmon_window_server_window_seconds{job="tpsmon"}`)
		if lp != 0 && sc >= lp {
			return lp
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape of the window at %s (newest scraped %s)", time.UnixMilli(lp).Format("15:04:05.000"), time.UnixMilli(sc).Format("15:04:05.000"))
		}
	}
}

// runOnVictoria runs the daemon while during does what it does with the
// store (waits, or stops and resumes it), then stops the daemon and its
// outputs: what they took is in the stores.
func runOnVictoria(t *testing.T, during func(vm *victoriatest.Server)) *victoriaRun {
	t.Helper()
	r := &victoriaRun{influx: influxtest.URL(t), from: time.Now()}
	r.numDB = influxtest.CreateDB(t, r.influx, "vm_numeric")
	r.defDB = influxtest.CreateDB(t, r.influx, "vm_default")
	listen := loopback.FreeAddr(t)
	r.vm = victoriatest.Start(t, victoriatest.Scrape(t, victoriaScrape, listen), "-promscrape.suppressScrapeErrors")

	// The demo's load cycle, fast: busy, queueing and idle windows, so
	// that the states and the latency fields change from window to window.
	src := &vllmsim.Server{Model: "test/model", SoloTPS: 80, MaxBatch: 32, Load: vllmsim.Profile(r.from, 4*time.Second)}
	vllm := httptest.NewServer(src)
	defer vllm.Close()
	// A second server whose histograms give the latency, SLO and goodput
	// fields: a request every 50 ms, time to first token 20 to 507 ms.
	var reqs []vllmsim.Request
	for i := range 300 {
		f := float64(i*37%40) / 40
		reqs = append(reqs, vllmsim.Request{Start: r.from.Add(time.Duration(i) * 50 * time.Millisecond),
			TTFT: time.Duration((0.02 + 0.5*f) * float64(time.Second)), TPOT: 20 * time.Millisecond, OutputTokens: 20})
	}
	lat := &vllmsim.Latencies{Model: "test/model", Requests: reqs}
	latSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, lat.Page(time.Now()))
	}))
	defer latSrv.Close()
	cfg := configtest.Private(t)
	cfg.Host = "vm-node"
	cfg.HTTP.Listen = listen
	cfg.Window, cfg.Grace = time.Second, 200*time.Millisecond
	cfg.GPU.Interval = 200 * time.Millisecond
	cfg.Servers = []config.ServerConfig{
		{Name: "llm", Engine: "vllm", MetricsURL: vllm.URL, GPUs: []string{"auto"}, ScrapeInterval: 100 * time.Millisecond},
		{Name: "lat", Engine: "vllm", MetricsURL: latSrv.URL, ScrapeInterval: 100 * time.Millisecond,
			SLO: &analysis.SLO{Objective: latency.Objective{TTFT: 300 * time.Millisecond}, Floor: 0.9}},
	}
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket, cfg.Sink.Influx.Profile = r.vm.URL, "tpsmon", string(sink.ProfileNumeric)
	// A push to the same store goes here too (OTLP: r.vm.URL +
	// "/opentelemetry/v1/metrics"), read back by vmGaugeWindows.

	log := slog.New(slog.DiscardHandler)
	var outputs []WindowWriter
	for db, profile := range map[string]sink.Profile{r.numDB: sink.ProfileNumeric, r.defDB: sink.ProfileInflux} {
		c := *cfg
		c.Sink.Influx.URL, c.Sink.Influx.Bucket, c.Sink.Influx.Profile = r.influx, db, string(profile)
		c.Sink.Spool.Dir = t.TempDir()
		out, stop, err := startInflux(&c, log, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		outputs = append(outputs, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- New(cfg, Options{Log: log, Outputs: outputs,
			OpenGPU: func() (GPUSampler, error) { return gpusim.Steady{Start: r.from}, nil }}).Run(ctx)
	}()
	during(r.vm)
	r.scrapedTo = waitScraped(t, r.vm)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return r
}

// read returns the run's windows: InfluxDB's in both profiles, and
// VictoriaMetrics' by line protocol and by scrape.
func (r *victoriaRun) read(t *testing.T) (num, def, lines, scraped storedWindows) {
	t.Helper()
	at := time.Now().Add(time.Minute)
	lookback := at.Sub(r.from) + time.Minute
	return influxWindows(t, r.influx, r.numDB), influxWindows(t, r.influx, r.defDB),
		vmLineWindows(t, r.vm, at, lookback), vmScrapeWindows(t, r.vm, at, lookback)
}

// TestVictoriaMetricsRoundTrip: every window of a run, and every field of
// each, read back from VictoriaMetrics through its Prometheus query API,
// equals what InfluxDB holds for it: by line protocol every window, by
// scraping /metrics every window scraped (the last closed one, stamped
// with its start); the state as state_code and one-hot agrees with the
// default profile's string.
func TestVictoriaMetricsRoundTrip(t *testing.T) {
	t.Parallel()
	r := runOnVictoria(t, func(*victoriatest.Server) { time.Sleep(3 * time.Second) })
	num, def, lines, scraped := r.read(t)
	if len(def) != len(num) {
		t.Errorf("InfluxDB holds %d windows in the default profile, %d in the numeric", len(def), len(num))
	}
	lp := compareWindows(t, "line protocol", num, lines, all)
	// /metrics: every window up to the last before the stop.
	sc := compareWindows(t, "/metrics", num, scraped, func(k wkey) bool { return k.start <= r.scrapedTo })
	states := checkCodes(t, "line protocol", def, lines)
	states += checkCodes(t, "/metrics", def, scraped)
	if lp.windows < 6 || sc.windows < 3 || states == 0 || contiguous(t, num) < 3 {
		t.Errorf("%d windows by line protocol, %d scraped, %d states checked", lp.windows, sc.windows, states)
	}
	logSample(t, num, lines, scraped)
}

// logSample logs one server window's fields as each store holds them.
func logSample(t *testing.T, num, lines, scraped storedWindows) {
	t.Helper()
	keys := slices.SortedFunc(maps.Keys(scraped), func(a, b wkey) int { return strings.Compare(a.String(), b.String()) })
	for _, k := range keys {
		if k.measurement != schema.Server || lines[k] == nil || num[k] == nil {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "window %s:\n%-34s %-22s %-22s %s\n", k, "field", "InfluxDB", "VM line protocol", "VM /metrics")
		for _, f := range slices.Sorted(maps.Keys(num[k].fields)) {
			fmt.Fprintf(&b, "%-34s %-22v %-22v %v\n", f, num[k].fields[f], lines[k].fields[f], scraped[k].fields[f])
		}
		t.Log(b.String())
		return
	}
}

// TestVictoriaMetricsOutage: VictoriaMetrics is stopped while windows
// close, and started again; afterwards it holds every window of the run
// once, each equal to InfluxDB's (which never went away).
func TestVictoriaMetricsOutage(t *testing.T) {
	t.Parallel()
	var down, up time.Time
	r := runOnVictoria(t, func(vm *victoriatest.Server) {
		time.Sleep(1200 * time.Millisecond)
		vm.Stop()
		down = time.Now()
		time.Sleep(2500 * time.Millisecond)
		up = time.Now()
		vm.Resume()
		time.Sleep(1200 * time.Millisecond)
	})
	num, _, lines, _ := r.read(t)
	lp := compareWindows(t, "line protocol", num, lines, all)
	inOutage := 0
	for k := range num {
		// A window closes a window and a grace after its start.
		if closed := time.UnixMilli(k.start).Add(1200 * time.Millisecond); k.measurement == schema.Server &&
			!closed.Before(down) && closed.Before(up) {
			inOutage++
		}
	}
	// The daemon saw the outage: its own /metrics, scraped once the store
	// was back, counts the writes it retried.
	retries := 0.0
	for _, s := range r.vm.Raw(t, `tpsmon_write_retries_total{job="tpsmon"}`, time.Now().Add(time.Minute), time.Hour) {
		for _, smp := range s.Samples {
			if !math.IsNaN(smp.V) { // the stale marker when the daemon stopped
				retries = max(retries, smp.V)
			}
		}
	}
	t.Logf("outage %s..%s: %d server windows closed in it, %v writes retried", down.Format("15:04:05.0"), up.Format("15:04:05.0"), inOutage, retries)
	if inOutage < 2 || retries == 0 || lp.windows != len(num) || contiguous(t, num) < 4 {
		t.Errorf("%d server windows closed in the outage, %v writes retried; %d of %d windows read back", inOutage, retries, lp.windows, len(num))
	}
}

// contiguous checks that each server's windows follow each other, one a
// second (the tests' window), and returns the fewest a server has.
func contiguous(t *testing.T, ws storedWindows) int {
	t.Helper()
	starts := map[string][]int64{}
	for k := range ws {
		if k.measurement == schema.Server {
			starts[k.id] = append(starts[k.id], k.start)
		}
	}
	fewest := math.MaxInt
	for id, ss := range starts {
		slices.Sort(ss)
		for i := 1; i < len(ss); i++ {
			if ss[i]-ss[i-1] != time.Second.Milliseconds() {
				t.Errorf("InfluxDB: server %s's windows at %s then %s", id, time.UnixMilli(ss[i-1]).Format("15:04:05.000"), time.UnixMilli(ss[i]).Format("15:04:05.000"))
			}
		}
		fewest = min(fewest, len(ss))
	}
	if len(starts) == 0 {
		return 0
	}
	return fewest
}
