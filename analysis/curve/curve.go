package curve

import (
	"math"
	"sort"
	"strings"
)

// Opt is a value a window may lack; a missing value is never 0.
type Opt struct {
	V  float64
	OK bool
}

// Some is a present value.
func Some(v float64) Opt { return Opt{V: v, OK: true} }

// Key is what makes windows one curve: the server, and the model, engine,
// engine version and GPU set it ran with. Version is the engine_version
// tag, empty where the engine never said: windows of an unknown version
// are a curve of their own, never merged into a known version's.
type Key struct {
	Host    string `json:"host"`
	Server  string `json:"server"`
	Engine  string `json:"engine,omitempty"`
	Version string `json:"engine_version,omitempty"`
	Model   string `json:"model,omitempty"`
	GPUs    string `json:"gpus,omitempty"`
}

// Window is one server window, as written (tpsmon_server).
type Window struct {
	Key Key
	// Seconds is the window's length (window_s); GPUs how many GPUs serve
	// it. Together they are its GPU-hours.
	Seconds float64
	GPUs    int
	// Coverage is the share of the window the source observed (absent:
	// all); rates are over Seconds × Coverage.
	Coverage              Opt
	Running               Opt
	SystemTPS, PerUserTPS Opt
	// Tokens and PromptTokens tell prompt-heavy windows from decode-heavy.
	Tokens, PromptTokens Opt
}

// Bounds on believable inputs: rates above this are refused as the
// joiner refuses them, running requests above maxRunning too.
const (
	maxRate    = 1e7
	maxRunning = 1e6
	maxSeconds = 86400 * 366
)

// Skip reasons, counted by Builder.
const (
	SkipNoRunning  = "no_running"
	SkipBadRunning = "bad_running"
	SkipBadRate    = "bad_rate"
	SkipBadSeconds = "bad_seconds"
	SkipBadCell    = "bad_cell"
)

func bad(v Opt, hi float64) bool {
	return v.OK && (math.IsNaN(v.V) || v.V < 0 || v.V > hi)
}

// check says why a window cannot be on the curve, or "".
func (w Window) check() string {
	switch {
	case !w.Running.OK:
		return SkipNoRunning
	case bad(w.Running, maxRunning):
		return SkipBadRunning
	case bad(w.SystemTPS, maxRate) || bad(w.PerUserTPS, maxRate):
		return SkipBadRate
	case math.IsNaN(w.Seconds) || w.Seconds < 0 || w.Seconds > maxSeconds || w.GPUs < 0 || bad(w.Coverage, 1):
		return SkipBadSeconds
	case bad(w.Tokens, math.MaxInt64) || bad(w.PromptTokens, math.MaxInt64):
		return SkipBadRate
	}
	return ""
}

// wv is a value and how many windows it stands for.
type wv struct{ v, w float64 }

// dist is a bag of values, exact (one per window) or bucketed.
type dist []wv

// quantiles returns the qs-quantiles of the windows' values, by linear
// interpolation between closest ranks (numpy's default) over the windows,
// a value standing for w windows counting w times. It sorts once for all
// of them: a bin's p10, median and p90 come from one sort.
func (d dist) quantiles(qs ...float64) []float64 {
	s := append(dist{}, d...)
	sort.Slice(s, func(i, j int) bool { return s[i].v < s[j].v })
	var n float64
	for _, x := range s {
		n += x.w
	}
	at := func(rank float64) float64 { // value of the window of 0-based rank
		var c float64
		for _, x := range s {
			c += x.w
			if rank < c {
				return x.v
			}
		}
		return s[len(s)-1].v
	}
	out := make([]float64, len(qs))
	for i, q := range qs {
		r := q * (n - 1)
		lo := math.Floor(r)
		a, b := at(lo), at(lo+1)
		out[i] = a + (r-lo)*(b-a)
	}
	return out
}

// quantile is one of quantiles.
func (d dist) quantile(q float64) float64 { return d.quantiles(q)[0] }

func (d dist) count() float64 {
	var n float64
	for _, x := range d {
		n += x.w
	}
	return n
}

// acc gathers one bin of one curve.
type acc struct {
	windows    float64
	gpuSecs    float64
	runningSum float64
	// sys and user hold each window's value, and each sketch bucket's
	// standing for its windows (sketched).
	sys, user dist
	means     Means
	sketched  bool
	// From rollup cells without sketches: the windows-weighted means of
	// their quantiles over cellN windows, and values standing in for
	// their windows in the range's median system TPS.
	cellN             float64
	cellSys, cellUser *Stat
	pseudo            dist
}

// Means are the sums a bin's exact means are read from; they add across
// windows and periods.
type Means struct {
	SysSeconds float64 // observed seconds of the windows with system TPS
	SysSum     float64 // Σ system TPS × those seconds: their tokens
	UserWeight float64 // stream-seconds of the windows with per-user TPS: Σ running × observed seconds
	UserSum    float64 // Σ per-user TPS × stream-seconds
	// Incomplete: some windows' weights are not known (a window of
	// unknown length, a rollup cell written before the means): the means
	// are then absent rather than over the rest.
	Incomplete bool
}

// observed is a window's observed seconds.
func (w Window) observed() float64 {
	if w.Coverage.OK {
		return w.Seconds * w.Coverage.V
	}
	return w.Seconds
}

func (m *Means) add(w Window) {
	s := w.observed()
	if !(s > 0) && (w.SystemTPS.OK || w.PerUserTPS.OK) {
		m.Incomplete = true
	}
	if w.SystemTPS.OK {
		m.SysSeconds += s
		m.SysSum += w.SystemTPS.V * s
	}
	if w.PerUserTPS.OK {
		m.UserWeight += w.Running.V * s
		m.UserSum += w.PerUserTPS.V * w.Running.V * s
	}
}

func (m *Means) merge(o Means) {
	m.SysSeconds, m.SysSum, m.UserWeight, m.UserSum = m.SysSeconds+o.SysSeconds, m.SysSum+o.SysSum, m.UserWeight+o.UserWeight, m.UserSum+o.UserSum
	m.Incomplete = m.Incomplete || o.Incomplete
}

// sys and user are the means, nil when incomplete or without a weight.
func (m Means) sys() *float64  { return m.ratio(m.SysSum, m.SysSeconds) }
func (m Means) user() *float64 { return m.ratio(m.UserSum, m.UserWeight) }

func (m Means) ratio(a, b float64) *float64 {
	if m.Incomplete || !(b > 0) {
		return nil
	}
	v := a / b
	return &v
}

// Pair is one observed (per-user, system) point: a window, or for rollups
// the best window of a bin in an hour.
type Pair struct {
	PerUserTPS float64 `json:"per_user_tps"`
	SystemTPS  float64 `json:"system_tps"`
	Running    float64 `json:"running"`
}

type curveAcc struct {
	key   Key
	kind  Kind
	bins  []acc
	pairs []Pair
}

// Builder gathers windows (or rollup cells) into curves. The zero value
// is not ready: use NewBuilder.
type Builder struct {
	curves map[string]*curveAcc
	// Skipped counts the windows left out, by reason (Skip*).
	Skipped map[string]int
	// Idle counts the windows under 0.5 running (all curves).
	Idle int
}

// NewBuilder is an empty Builder.
func NewBuilder() *Builder {
	return &Builder{curves: map[string]*curveAcc{}, Skipped: map[string]int{}}
}

func (b *Builder) curve(k Key, kind Kind) *curveAcc {
	id := strings.Join([]string{k.Host, k.Server, k.Engine, k.Version, k.Model, k.GPUs, string(kind)}, "\x00")
	c, ok := b.curves[id]
	if !ok {
		c = &curveAcc{key: k, kind: kind, bins: make([]acc, len(bins))}
		b.curves[id] = c
	}
	return c
}

// Add puts one window on its curve, or counts why not. It returns the
// skip reason, "" when taken (idle windows are taken, and counted).
func (b *Builder) Add(w Window) string {
	if why := w.check(); why != "" {
		b.Skipped[why]++
		return why
	}
	i := BinOf(w.Running.V)
	if i < 0 {
		b.Idle++
		return ""
	}
	c := b.curve(w.Key, KindOf(w.Tokens, w.PromptTokens))
	a := &c.bins[i]
	a.windows++
	a.gpuSecs += w.Seconds * float64(w.GPUs)
	a.runningSum += w.Running.V
	if w.SystemTPS.OK {
		a.sys = append(a.sys, wv{w.SystemTPS.V, 1})
	}
	if w.PerUserTPS.OK {
		a.user = append(a.user, wv{w.PerUserTPS.V, 1})
	}
	a.means.add(w)
	if w.SystemTPS.OK && w.PerUserTPS.OK {
		c.pairs = append(c.pairs, Pair{w.PerUserTPS.V, w.SystemTPS.V, w.Running.V})
	}
	return ""
}

// AddCell puts a rollup cell (as read back over a range) on its curve,
// or counts why not. A bin's quantiles are the cell's; a second cell of
// the same bin (not written by tpsmon rollup, which keys cells by bin)
// is averaged in by windows.
func (b *Builder) AddCell(x Cell) string {
	i := binIndex(x.Bin)
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 && v <= maxRate }
	ok := i >= 0 && finite(x.Windows) && x.GPUSeconds >= 0 && x.RunningSum >= 0 &&
		(x.Kind == Decode || x.Kind == Prompt || x.Kind == Unclassified)
	for _, v := range []float64{x.Means.SysSeconds, x.Means.SysSum, x.Means.UserWeight, x.Means.UserSum} {
		ok = ok && v >= 0 && !math.IsInf(v, 0)
	}
	for _, st := range []*Stat{x.Sys, x.User} {
		if st != nil && (!finite(st.P10) || !finite(st.P50) || !finite(st.P90)) {
			ok = false
		}
	}
	if !ok {
		b.Skipped[SkipBadCell]++
		return SkipBadCell
	}
	if x.Windows == 0 {
		return ""
	}
	c := b.curve(x.Key, x.Kind)
	a := &c.bins[i]
	a.windows += x.Windows
	a.gpuSecs += x.GPUSeconds
	a.runningSum += x.RunningSum
	a.means.merge(x.Means)
	if x.sketched {
		// Its buckets stand for its windows' values, as a window's own
		// value does; the frontier comes with the sketches (Ranged).
		a.sketched = true
		a.sys = append(a.sys, x.sysSk.dist()...)
		a.user = append(a.user, x.userSk.dist()...)
		return ""
	}
	merge := func(have **Stat, n float64, add *Stat) {
		if add == nil {
			return
		}
		if *have == nil {
			s := *add
			*have = &s
			return
		}
		h := *have
		wa, wb := n/(n+x.Windows), x.Windows/(n+x.Windows)
		h.P10, h.P50, h.P90 = wa*h.P10+wb*add.P10, wa*h.P50+wb*add.P50, wa*h.P90+wb*add.P90
	}
	merge(&a.cellSys, a.cellN, x.Sys)
	merge(&a.cellUser, a.cellN, x.User)
	a.cellN += x.Windows
	// The range's median system TPS reads the bin as a fifth of its
	// windows at p10 and at p90 and the rest at the median.
	if x.Sys != nil {
		a.pseudo = append(a.pseudo, wv{x.Sys.P10, 0.2 * x.Windows}, wv{x.Sys.P50, 0.6 * x.Windows}, wv{x.Sys.P90, 0.2 * x.Windows})
	}
	if x.Best != nil {
		c.pairs = append(c.pairs, *x.Best)
	}
	return ""
}
