// Package live keeps what the daemon saw last, the recent closed windows of
// every server and GPU and the readings of the window still open, and
// serves it read-only as api.Windows for `tpsmon top`.
package live

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/window"
)

// maxOpenSamples bounds the scrapes kept per server for the open window.
const maxOpenSamples = 256

// View is fed by the pipeline's main loop (WriteWindows, Server, GPUs) and
// read by HTTP handlers; it is safe for both at once.
type View struct {
	host   string
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	series map[string][]api.Point // by seriesKey, oldest first
	newest time.Time              // start of the newest closed window
	// openAt is the start of the open window: the end of the newest
	// closed one, or before any closed, the window of the first reading.
	openAt time.Time
	scrape map[string]*openServer
	gpus   map[string]sample.GPU // latest reading, by UUID and instance
}

type openServer struct {
	engine, model string
	// samples holds the scrapes since openAt, after the last one before
	// it, which is the base of the counters' deltas.
	samples []sample.Server
}

// New returns an empty view of windows of the given length on host; now
// is the clock (nil: time.Now).
func New(host string, window time.Duration, now func() time.Time) *View {
	if now == nil {
		now = time.Now
	}
	return &View{host: host, window: window, now: now, series: map[string][]api.Point{},
		scrape: map[string]*openServer{}, gpus: map[string]sample.GPU{}}
}

// WriteWindows takes closed windows (the pipeline's outputs).
func (v *View) WriteWindows(cs []analysis.Closed) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, p := range sink.Points(cs) {
		ap := api.Point{Measurement: p.Measurement, Time: p.Time.UTC(), Tags: p.TagMap(), Fields: p.FieldMap()}
		k := seriesKey(ap)
		s := append(v.series[k], ap)
		if len(s) > api.MaxHistory {
			s = s[len(s)-api.MaxHistory:]
		}
		v.series[k] = s
		if ap.Time.After(v.newest) {
			v.newest = ap.Time
		}
	}
	if end := v.newest.Add(v.window); end.After(v.openAt) {
		v.openAt = end
	}
	// Series gone for longer than the history (a server removed by a
	// reload, a GPU lost) are forgotten.
	for k, s := range v.series {
		if v.newest.Sub(s[len(s)-1].Time) >= api.MaxHistory*v.window {
			delete(v.series, k)
		}
	}
	for _, o := range v.scrape {
		o.prune(v.openAt)
	}
	return nil
}

// seriesKey names a series: a server by name, a GPU by index and UUID
// (its server tag changes when the GPU is placed).
func seriesKey(p api.Point) string {
	if p.Measurement == schema.GPU {
		return p.Measurement + "\x00" + p.Tags[schema.TagGPU] + "\x00" + p.Tags[schema.TagUUID]
	}
	return p.Measurement + "\x00" + p.Tags[schema.TagServer]
}

// Server takes one successful scrape of a server.
func (v *View) Server(name string, s sample.Server) {
	v.mu.Lock()
	defer v.mu.Unlock()
	o := v.scrape[name]
	if o == nil {
		o = &openServer{}
		v.scrape[name] = o
	}
	if s.Engine != "" {
		o.engine = s.Engine
	}
	if s.Model != "" {
		o.model = s.Model
	}
	v.first(s.Time)
	o.samples = append(o.samples, s)
	if len(o.samples) > maxOpenSamples {
		o.samples = o.samples[1:]
	}
	o.prune(v.openAt)
}

// prune drops the scrapes before the last one before at.
func (o *openServer) prune(at time.Time) {
	i := 0
	for i+1 < len(o.samples) && !o.samples[i+1].Time.After(at) {
		i++
	}
	o.samples = o.samples[i:]
}

// first starts the open window at the first reading's window.
func (v *View) first(t time.Time) {
	if v.openAt.IsZero() {
		v.openAt = window.Start(t, v.window)
	}
}

// GPUs takes one reading of the node's GPUs.
func (v *View) GPUs(smp []sample.GPU) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, s := range smp {
		v.first(s.Time)
		v.gpus[s.UUID+"\x00"+s.Instance] = s
	}
}

// Snapshot returns the last history closed windows of every series and
// the open window.
func (v *View) Snapshot(history int) api.Windows {
	v.mu.Lock()
	defer v.mu.Unlock()
	w := api.Windows{Host: v.host, Now: v.now().UTC(), WindowSeconds: v.window.Seconds(),
		Closed: []api.Point{}, Open: []api.Point{}}
	keys := make([]string, 0, len(v.series))
	for k := range v.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s := v.series[k]
		w.Closed = append(w.Closed, s[max(0, len(s)-history):]...)
	}
	sort.SliceStable(w.Closed, func(a, b int) bool { return w.Closed[a].Time.Before(w.Closed[b].Time) })

	names := make([]string, 0, len(v.scrape))
	for n := range v.scrape {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if p, ok := v.scrape[n].point(n, v.host, v.openAt); ok {
			w.Open = append(w.Open, p)
		}
	}
	gk := make([]string, 0, len(v.gpus))
	for k := range v.gpus {
		gk = append(gk, k)
	}
	sort.Slice(gk, func(a, b int) bool {
		x, y := v.gpus[gk[a]], v.gpus[gk[b]]
		if x.Index != y.Index {
			return x.Index < y.Index
		}
		return x.Instance < y.Instance
	})
	// A GPU is read about once a second, so the open window may hold no
	// reading yet: the latest one stands for it unless it is older than a
	// window (a GPU gone).
	for _, k := range gk {
		if s := v.gpus[k]; !s.Time.Before(v.openAt.Add(-v.window)) {
			w.Open = append(w.Open, gpuPoint(s, v.host, v.openAt))
		}
	}
	return w
}

// point says what the scrapes of the open window show so far: token rates
// from the counters' growth since the last scrape before it, the latest
// gauges. ok is false when no scrape falls in the open window.
func (o *openServer) point(name, host string, at time.Time) (api.Point, bool) {
	if len(o.samples) == 0 || o.samples[len(o.samples)-1].Time.Before(at) {
		return api.Point{}, false
	}
	first, last := o.samples[0], o.samples[len(o.samples)-1]
	f := map[string]any{}
	g := func(name string, gg sample.Gauge) {
		if last.HasGauge[gg] {
			f[name] = last.Gauge[gg]
		}
	}
	g(schema.FieldRunning, sample.Running)
	g(schema.FieldWaiting, sample.Waiting)
	g(schema.FieldKVCacheUsage, sample.KVUsage)
	// A counter that went down is a restarted server: no rate this time.
	delta := func(c sample.Counter) (float64, bool) {
		if !first.HasCounter[c] || !last.HasCounter[c] || last.Counter[c] < first.Counter[c] {
			return 0, false
		}
		return last.Counter[c] - first.Counter[c], true
	}
	if secs := last.Time.Sub(first.Time).Seconds(); secs > 0 {
		if d, ok := delta(sample.GenerationTokens); ok {
			f[schema.FieldTokens] = int64(d)
			f[schema.FieldSystemTPS] = d / secs
		}
		if d, ok := delta(sample.PromptTokens); ok {
			f[schema.FieldPromptTokens] = int64(d)
			f[schema.FieldPromptTPS] = d / secs
		}
		n, ok1 := delta(sample.ITLCount)
		sum, ok2 := delta(sample.ITLSum)
		if ok1 && ok2 && n > 0 && sum > 0 {
			f[schema.FieldPerUserTPS] = n / sum
		}
	}
	return api.Point{Measurement: schema.Server, Time: at,
		Tags:   map[string]string{schema.TagHost: host, schema.TagServer: name, schema.TagEngine: o.engine, schema.TagModel: o.model},
		Fields: f}, true
}

func gpuPoint(s sample.GPU, host string, at time.Time) api.Point {
	label := strconv.Itoa(s.Index)
	if s.Instance != "" {
		label += "/" + s.Instance
	}
	f := map[string]any{}
	if s.Err != nil {
		f[schema.FieldError] = s.Err.Error()
	} else {
		set := func(field sample.Field, name string, v any) {
			if s.Have(field) {
				f[name] = v
			}
		}
		set(sample.FieldUtil, schema.FieldUtil, s.UtilPct)
		set(sample.FieldMemUtil, schema.FieldMemUtil, s.MemUtilPct)
		set(sample.FieldMemory, schema.FieldMemUsedBytes, s.MemUsedBytes)
		set(sample.FieldMemory, schema.FieldMemTotalBytes, s.MemTotalBytes)
		set(sample.FieldPower, schema.FieldPowerW, s.PowerW)
		set(sample.FieldTemp, schema.FieldTempC, s.TempC)
		set(sample.FieldSMClock, schema.FieldSMClockMHz, s.SMClockMHz)
		set(sample.FieldThrottle, schema.FieldThrottle, int64(s.Throttle))
		set(sample.FieldGPM, schema.FieldSMActive, s.SMActive)
	}
	return api.Point{Measurement: schema.GPU, Time: at,
		Tags:   map[string]string{schema.TagHost: host, schema.TagGPU: label, schema.TagUUID: s.UUID, schema.TagName: s.Name},
		Fields: f}
}

// ServeHTTP answers GET ?history=N (1..api.MaxHistory, default 1) with
// the snapshot as JSON. Nothing in it is secret: the same points go to
// InfluxDB.
func (v *View) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "read-only: GET only", http.StatusMethodNotAllowed)
		return
	}
	history := 1
	if h := r.URL.Query().Get("history"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 1 || n > api.MaxHistory {
			http.Error(w, fmt.Sprintf("history=%q: want a whole number from 1 to %d", h, api.MaxHistory), http.StatusBadRequest)
			return
		}
		history = n
	}
	b, err := json.Marshal(v.Snapshot(history))
	if err != nil {
		http.Error(w, "encoding the windows: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}
