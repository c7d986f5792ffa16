// Package top is `tpsmon top`: a live terminal view of the daemon's windows
// (one row per server, one per GPU) read from its HTTP API.
//
// It is built on bubbletea and lipgloss: bubbletea's model is a plain value
// with a View that returns a string, so the screen is tested as golden text
// without a terminal, and lipgloss degrades to plain text where colour is
// not wanted (--once, dumb terminals). Both are maintained and pure Go.
package top

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/schema"
)

// unknown marks a value a window does not have.
var unknown = math.NaN()

// serverRow is one server as top shows it: its last closed window, and
// from the open window the tokens per second so far.
type serverRow struct {
	name, state, engine, model, gpus string
	suspect                          string // the sanity rules that doubt its last window, comma-joined
	tps, user, prompt, tpj           float64
	running, waiting, kv             float64
	mbu                              float64 // the decode ceiling's model bandwidth utilization
	now                              float64
	history                          []float64      // system tok/s per closed window, oldest first
	windows                          []curve.Window // the closed windows, for the operating curve
	// What one user felt: TTFT and ITL p90 (seconds; a histogram's lower
	// edge when the p90 is above its last one) and the attainment's bounds.
	ttft90, ttft90Lo, itl90, itl90Lo float64
	sloLo, sloHi                     float64
	// ttftBasis is from when a log's TTFT counts (schema.FieldTTFTBasis).
	ttftBasis string
}

// gpuRow is one GPU's last closed window, and its utilization now.
type gpuRow struct {
	label, name, server, err    string
	util, sm, memUsed, memTotal float64
	power, temp                 float64
	throttle                    int64 // -1: unknown
	now                         float64
	// closed says a closed window named the GPU's server; before, no
	// GPU is called unused.
	closed bool
}

// frame is what one API answer says, in rows.
type frame struct {
	host       string
	window     time.Duration
	now        time.Time
	lastClosed time.Time // start of the newest closed window; zero: none yet
	servers    []serverRow
	gpus       []gpuRow
}

func num(p api.Point, k string) float64 {
	if v, ok := p.Float(k); ok {
		return v
	}
	return unknown
}

// build turns an API answer into rows: the newest closed window of each
// series, its history and the open window's values.
func build(w api.Windows) frame {
	f := frame{host: w.Host, window: time.Duration(w.WindowSeconds * float64(time.Second)), now: w.Now}
	srv := map[string]*serverRow{}
	gpu := map[string]*gpuRow{}
	var order []string
	server := func(name string) *serverRow {
		r := srv[name]
		if r == nil {
			r = &serverRow{name: name, state: "-", tps: unknown, user: unknown, prompt: unknown, tpj: unknown,
				running: unknown, waiting: unknown, kv: unknown, mbu: unknown, now: unknown, ttft90: unknown, ttft90Lo: unknown,
				itl90: unknown, itl90Lo: unknown, sloLo: unknown, sloHi: unknown}
			srv[name] = r
			order = append(order, name)
		}
		return r
	}
	var gorder []string
	gpuOf := func(p api.Point) *gpuRow {
		k := p.Tags[schema.TagGPU] + "\x00" + p.Tags[schema.TagUUID]
		r := gpu[k]
		if r == nil {
			r = &gpuRow{label: p.Tags[schema.TagGPU], name: p.Tags[schema.TagName], util: unknown, sm: unknown, memUsed: unknown,
				memTotal: unknown, power: unknown, temp: unknown, throttle: -1, now: unknown}
			gpu[k] = r
			gorder = append(gorder, k)
		}
		return r
	}
	// Closed points come oldest first: the last one of a series wins.
	for _, p := range w.Closed {
		if p.Time.After(f.lastClosed) {
			f.lastClosed = p.Time
		}
		switch p.Measurement {
		case schema.Server:
			r := server(p.Tags[schema.TagServer])
			r.state, r.suspect = p.String(schema.FieldState), p.String(schema.FieldSuspect)
			r.engine, r.model, r.gpus = p.Tags[schema.TagEngine], p.Tags[schema.TagModel], p.Tags[schema.TagGPUs]
			r.tps, r.user, r.prompt, r.tpj = num(p, schema.FieldSystemTPS), num(p, schema.FieldPerUserTPS), num(p, schema.FieldPromptTPS), num(p, schema.FieldTokensPerJoule)
			r.running, r.waiting, r.kv = num(p, schema.FieldRunning), num(p, schema.FieldWaiting), num(p, schema.FieldKVCacheUsage)
			r.mbu = num(p, schema.FieldMBU)
			r.history = append(r.history, r.tps)
			r.ttft90, r.ttft90Lo = num(p, schema.FieldTTFTP90), num(p, schema.LoField(schema.FieldTTFTP90))
			r.ttftBasis = p.String(schema.FieldTTFTBasis)
			r.itl90, r.itl90Lo = num(p, schema.FieldITLP90), num(p, schema.LoField(schema.FieldITLP90))
			r.sloLo, r.sloHi = num(p, schema.FieldSLOAttainmentLo), num(p, schema.FieldSLOAttainmentHi)
			r.windows = append(r.windows, curveWindow(p))
		case schema.GPU:
			r := gpuOf(p)
			r.name, r.server, r.err, r.closed = p.Tags[schema.TagName], p.Tags[schema.TagServer], p.String(schema.FieldError), true
			r.util, r.sm, r.memUsed, r.memTotal = num(p, schema.FieldUtil), num(p, schema.FieldSMActive), num(p, schema.FieldMemUsedBytes), num(p, schema.FieldMemTotalBytes)
			r.power, r.temp = num(p, schema.FieldPowerW), num(p, schema.FieldTempC)
			r.throttle = -1
			if v, ok := p.Float(schema.FieldThrottle); ok {
				r.throttle = int64(v)
			}
		}
	}
	for _, p := range w.Open {
		switch p.Measurement {
		case schema.Server:
			server(p.Tags[schema.TagServer]).now = num(p, schema.FieldSystemTPS)
		case schema.GPU:
			r := gpuOf(p)
			r.now = num(p, schema.FieldUtil)
			if r.err == "" {
				r.err = p.String(schema.FieldError)
			}
		}
	}
	for _, n := range order {
		f.servers = append(f.servers, *srv[n])
	}
	for _, k := range gorder {
		f.gpus = append(f.gpus, *gpu[k])
	}
	sort.SliceStable(f.gpus, func(a, b int) bool { return labelLess(f.gpus[a].label, f.gpus[b].label) })
	return f
}

// labelLess orders GPU labels ("0", "1/gi2", "10") by index, then instance.
func labelLess(a, b string) bool {
	ia, ra, _ := strings.Cut(a, "/")
	ib, rb, _ := strings.Cut(b, "/")
	if len(ia) != len(ib) {
		return len(ia) < len(ib)
	}
	if ia != ib {
		return ia < ib
	}
	return ra < rb
}

// SortKey orders the server rows.
type SortKey int

// The orders `s` cycles through.
const (
	ByName SortKey = iota
	ByTPS
	ByState
	numSortKeys
)

func (k SortKey) String() string { return [...]string{"name", "tok/s", "state"}[k] }

// stateRank puts the states that need a look first.
var stateRank = map[string]int{schema.StateDown: 0, schema.StateKVBound: 1, schema.StateQueueBound: 2,
	schema.StateSaturated: 3, schema.StateUnderutilized: 4, schema.StateOK: 5, schema.StateIdle: 6, schema.StateSleeping: 6}

func rank(state string) int {
	if r, ok := stateRank[state]; ok {
		return r
	}
	return 7
}

func sortServers(rows []serverRow, k SortKey) {
	sort.SliceStable(rows, func(a, b int) bool {
		x, y := rows[a], rows[b]
		switch k {
		case ByTPS:
			xv, yv := x.tps, y.tps
			if math.IsNaN(xv) {
				xv = -1
			}
			if math.IsNaN(yv) {
				yv = -1
			}
			if xv != yv {
				return xv > yv
			}
		case ByState:
			if rank(x.state) != rank(y.state) {
				return rank(x.state) < rank(y.state)
			}
		}
		return x.name < y.name
	})
}

// needsLook says whether a row stays under the filter: a server not ok
// or idle, a GPU no server uses, throttled for more than idleness, or
// unreadable.
func (r serverRow) needsLook() bool { return rank(r.state) < 5 || r.state == "-" || r.suspect != "" }

func (r gpuRow) needsLook() bool {
	return (r.closed && r.server == "") || r.err != "" || (r.throttle > 0 && r.throttle&^idleBits != 0)
}

// seriesKey names a series: a server by name, a GPU by label and UUID.
func seriesKey(p api.Point) string {
	if p.Measurement == schema.GPU {
		return p.Measurement + "\x00" + p.Tags[schema.TagGPU] + "\x00" + p.Tags[schema.TagUUID]
	}
	return p.Measurement + "\x00" + p.Tags[schema.TagServer]
}

// merge takes a newer answer and keeps the closed windows of the older one
// that it repeats not: each series up to api.MaxHistory windows, oldest
// first; a series the newer answer lacks is gone.
func merge(old, newer api.Windows) api.Windows {
	present := map[string]bool{}
	have := map[string]bool{}
	for _, p := range newer.Closed {
		present[seriesKey(p)] = true
		have[seriesKey(p)+"\x00"+p.Time.String()] = true
	}
	var all []api.Point
	for _, p := range old.Closed {
		if k := seriesKey(p); present[k] && !have[k+"\x00"+p.Time.String()] {
			all = append(all, p)
		}
	}
	all = append(all, newer.Closed...)
	sort.SliceStable(all, func(a, b int) bool { return all[a].Time.Before(all[b].Time) })
	count := map[string]int{}
	for _, p := range all {
		count[seriesKey(p)]++
	}
	out := make([]api.Point, 0, len(all))
	for _, p := range all {
		k := seriesKey(p)
		if count[k] > api.MaxHistory {
			count[k]--
			continue
		}
		out = append(out, p)
	}
	newer.Closed = out
	return newer
}

// curveWindow is a closed server point as the operating curve reads it.
func curveWindow(p api.Point) curve.Window {
	opt := func(k string) curve.Opt {
		v, ok := p.Float(k)
		return curve.Opt{V: v, OK: ok}
	}
	secs, _ := p.Float(schema.FieldWindowS)
	return curve.Window{Key: curve.KeyOf(p.Tags), Seconds: secs, GPUs: curve.GPUCount(p.Tags[schema.TagGPUs]),
		Running: opt(schema.FieldRunning), SystemTPS: opt(schema.FieldSystemTPS), PerUserTPS: opt(schema.FieldPerUserTPS),
		Tokens: opt(schema.FieldTokens), PromptTokens: opt(schema.FieldPromptTokens)}
}

// curveLine is the server's operating point over the windows top holds:
// that of its curve with the most windows.
func (r serverRow) curveLine(floor float64) string {
	b := curve.NewBuilder()
	for _, w := range r.windows {
		b.Add(w)
	}
	var best *curve.Curve
	cs := b.Curves(curve.Options{Floor: floor})
	for i := range cs {
		if best == nil || cs[i].Windows > best.Windows {
			best = &cs[i]
		}
	}
	if best == nil {
		return fmt.Sprintf("no operating curve: nothing ran in the last %d windows", len(r.windows))
	}
	return fmt.Sprintf("%s (last %d windows)", curve.ShortLine(best.Operating), len(r.windows))
}
