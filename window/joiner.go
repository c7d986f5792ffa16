// Package window joins GPU samples and server samples in tumbling windows
// aligned to the Unix epoch, and turns each closed window into the points
// of tpsmon's schema. It is pure: no I/O, and the clock is the caller's
// (every method takes the time), so tests need no sleeping.
package window

import (
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/gpu"
	"github.com/tpsmon/tpsmon/schema"
)

// Config sets the window arithmetic.
type Config struct {
	Window time.Duration
	Grace  time.Duration
	// MaxGap is the longest silence between two samples of a source that
	// still counts as covered; longer gaps lower coverage.
	MaxGap time.Duration
	Host   string
	// Start is when observation began; the first window is the one that
	// holds it.
	Start      time.Time
	Thresholds Thresholds
}

// Server describes one monitored inference server.
type Server struct {
	Name   string
	Engine string
	Model  string // used until a sample names the model
	// GPUs lists the indexes or UUIDs of the GPUs the server runs on;
	// "*" stands for every GPU.
	GPUs   []string
	Source string // schema.SourceMetrics or schema.SourceLog
}

// Start returns the start of the window of length w that holds t.
// Windows are aligned to the Unix epoch for any length: t - t mod w on
// Unix time (time.Truncate counts from year 1, which agrees with the
// epoch only for lengths that divide a day). UTC, so that window starts
// compare and key maps alike whatever zone t is in.
func Start(t time.Time, w time.Duration) time.Time {
	ns := t.UnixNano()
	r := ns % int64(w)
	if r < 0 {
		r += int64(w)
	}
	return time.Unix(0, ns-r).UTC()
}

// maxCatchUp bounds how many windows one Flush closes: after a suspend or
// a clock jump the joiner skips ahead instead of writing hours of empty
// windows.
const maxCatchUp = 360

// Joiner owns all window arithmetic.
type Joiner struct {
	cfg        Config
	next       time.Time // start of the oldest open window
	servers    []*serverState
	byName     map[string]*serverState
	gpus       map[string]*gpuState // by UUID
	late       uint64
	lateTokens float64
	skipped    uint64
}

type serverState struct {
	Server
	counters [collector.NumCounters]counter
	gauges   [collector.NumGauges]gauge
	seen     timeline // successful scrapes
	// acc sums, per window, the intervals from completion-time counters
	// (not Observed) and from log lines (Observed), spread as they come.
	acc map[time.Time]*windowAcc
	// completion is set once the server counts tokens at completion: a
	// window without intervals then made 0 tokens, it is not unknown.
	completion bool
	// watched records when the server's log was readable: a silent log is
	// an idle server, not a missing one.
	watched timeline
	ivCum   float64 // running total of interval tokens, for rounding
	// engineNamed says the engine tag was detected, not configured.
	engineNamed bool
}

type gpuState struct {
	index      int
	instance   string // MIG instance, or empty
	uuid, name string
	util       gauge
	memUtil    gauge
	memUsed    gauge
	memTotal   gauge
	power      gauge
	temp       gauge
	smClock    gauge
	energy     counter // mJ
	// GPM activity, % over the time before each sample
	smActive, smOcc, tensor, dram gauge
	throttle                      []gpoint
	seen                          timeline
	errs                          []gerr
}

type gerr struct {
	t   time.Time
	err error
}

// New returns a joiner for the given servers.
func New(cfg Config, servers []Server) *Joiner {
	if cfg.Thresholds == (Thresholds{}) {
		cfg.Thresholds = DefaultThresholds
	}
	j := &Joiner{
		cfg:    cfg,
		next:   Start(cfg.Start, cfg.Window),
		byName: make(map[string]*serverState, len(servers)),
		gpus:   make(map[string]*gpuState),
	}
	for _, s := range servers {
		st := &serverState{Server: s}
		j.servers = append(j.servers, st)
		j.byName[s.Name] = st
	}
	return j
}

// SetServers replaces the monitored servers (a reload): servers kept by
// name keep their series, so their windows go on unbroken; new ones start
// empty; removed ones are forgotten with their open window.
func (j *Joiner) SetServers(servers []Server, maxGap time.Duration) {
	j.cfg.MaxGap = maxGap
	old := j.byName
	j.servers = j.servers[:0]
	j.byName = make(map[string]*serverState, len(servers))
	for _, s := range servers {
		st, ok := old[s.Name]
		if !ok {
			st = &serverState{}
		}
		model := st.Model
		st.Server = s
		if s.Model == "" {
			st.Model = model
		}
		j.servers = append(j.servers, st)
		j.byName[s.Name] = st
	}
}

// Late returns how many samples arrived for windows already closed.
func (j *Joiner) Late() uint64 { return j.late }

// Skipped returns how many windows were skipped after a clock jump.
func (j *Joiner) Skipped() uint64 { return j.skipped }

// AddServer records one scrape of a server. It reports false when the
// sample was late (its window had closed) or the server is unknown.
func (j *Joiner) AddServer(name string, s collector.Sample) bool {
	st, ok := j.byName[name]
	if !ok {
		return false
	}
	if s.Time.Before(j.next) {
		j.late++
		return false
	}
	if s.Model != "" {
		st.Model = s.Model
	}
	if s.Engine != "" {
		st.Engine = s.Engine
	}
	for c := range collector.NumCounters {
		if s.HasCounter[c] {
			st.counters[c].add(s.Time, s.Counter[c])
		}
	}
	for g := range collector.NumGauges {
		if s.HasGauge[g] {
			st.gauges[g].add(s.Time, s.Gauge[g])
		}
	}
	if s.HasCounter[collector.CompletionTokens] {
		st.completion = true
	}
	for _, iv := range s.Intervals {
		j.addInterval(st, iv)
	}
	if s.Discarded == 0 {
		// A sample that lost values to the Guard is not coverage: the
		// window knows less, and says so.
		st.seen.add(s.Time)
	}
	return true
}

// AddLog records what one log line said of the interval it covers. The
// part of an interval that falls in windows already closed is late: it is
// counted (LateTokens) and dropped.
func (j *Joiner) AddLog(name string, iv collector.Interval) bool {
	st, ok := j.byName[name]
	if !ok {
		return false
	}
	iv.Observed = true
	return j.addInterval(st, iv)
}

// NameEngine sets a server's engine tag when its configuration left it to
// detection.
func (j *Joiner) NameEngine(name, engine string) {
	st, ok := j.byName[name]
	if !ok || engine == "" {
		return
	}
	// Ollama relays llama-server's lines: a detected llamacpp becomes
	// ollama once one of Ollama's own lines is read.
	if st.Engine == "" || st.engineNamed && st.Engine == "llamacpp" && engine == "ollama" {
		st.Engine, st.engineNamed = engine, true
	}
}

// NameModel sets a server's model tag from its log; a model named by the
// server's metrics or configuration stays.
func (j *Joiner) NameModel(name, model string) {
	if st, ok := j.byName[name]; ok && model != "" && (st.Model == "" || st.Source == "log") {
		st.Model = model
	}
}

// Watch records that a server's log was readable at t.
func (j *Joiner) Watch(name string, t time.Time) {
	if st, ok := j.byName[name]; ok && !t.Before(j.next) {
		st.watched.add(t)
	}
}

func (j *Joiner) addInterval(st *serverState, iv collector.Interval) bool {
	if !iv.End.After(j.next) && !(iv.End.Equal(j.next) && iv.Start.Equal(iv.End)) {
		j.late++
		if iv.Tokens > 0 {
			j.lateTokens += iv.Tokens
		}
		return false
	}
	if iv.Start.Before(j.next) {
		j.late++
		if iv.Tokens > 0 {
			j.lateTokens += iv.Tokens * float64(j.next.Sub(iv.Start)) / float64(iv.End.Sub(iv.Start))
		}
	}
	// Spread it over the open windows it touches now: memory per window,
	// not per line, however chatty the log.
	if st.acc == nil {
		st.acc = map[time.Time]*windowAcc{}
	}
	k := 0
	if iv.Observed {
		k = 1
	}
	first := Start(iv.Start, j.cfg.Window)
	if first.Before(j.next) {
		first = j.next
	}
	for w := first; !w.After(iv.End); w = w.Add(j.cfg.Window) {
		e := w.Add(j.cfg.Window)
		if w.Equal(iv.End) && iv.End.After(iv.Start) {
			break // (Start, End] ends exactly at this window's start
		}
		a := st.acc[w]
		if a == nil {
			a = &windowAcc{}
			st.acc[w] = a
		}
		if iv.Observed {
			lo, hi := iv.Start, iv.End
			if lo.Before(w) {
				lo = w
			}
			if hi.After(e) {
				hi = e
			}
			a.cover = addCover(a.cover, lo, hi)
		}
		a.sums[k].add(iv, w, e)
	}
	return true
}

// LateTokens returns the output tokens dropped because they fell in
// windows already closed (long requests reported at their end).
func (j *Joiner) LateTokens() float64 { return j.lateTokens }

// AddGPU records one reading of one GPU; false when it was late.
func (j *Joiner) AddGPU(s gpu.Sample) bool {
	if s.Time.Before(j.next) {
		j.late++
		return false
	}
	g, ok := j.gpus[s.UUID]
	if !ok {
		g = &gpuState{index: s.Index, uuid: s.UUID}
		j.gpus[s.UUID] = g
	}
	g.index, g.name, g.instance = s.Index, s.Name, s.Instance
	if s.Err != nil {
		g.errs = append(g.errs, gerr{s.Time, s.Err})
		return true
	}
	switch {
	case len(s.UtilSamples) > 0:
		// Every driver sample, not one reading a second.
		for _, u := range s.UtilSamples {
			if !u.Time.Before(j.next) {
				g.util.add(u.Time, u.Pct)
			}
		}
	case s.Have(gpu.FieldUtil):
		g.util.add(s.Time, s.UtilPct)
	}
	if s.Have(gpu.FieldGPM) {
		g.smActive.add(s.Time, s.SMActive)
		g.smOcc.add(s.Time, s.SMOccupancy)
		g.tensor.add(s.Time, s.TensorActive)
		g.dram.add(s.Time, s.DRAMActive)
	}
	if s.Have(gpu.FieldMemUtil) {
		g.memUtil.add(s.Time, s.MemUtilPct)
	}
	if s.Have(gpu.FieldMemory) {
		g.memUsed.add(s.Time, float64(s.MemUsedBytes))
		g.memTotal.add(s.Time, float64(s.MemTotalBytes))
	}
	if s.Have(gpu.FieldPower) {
		g.power.add(s.Time, s.PowerW)
	}
	if s.Have(gpu.FieldEnergy) {
		g.energy.add(s.Time, float64(s.EnergyMJ))
	}
	if s.Have(gpu.FieldTemp) {
		g.temp.add(s.Time, s.TempC)
	}
	if s.Have(gpu.FieldSMClock) {
		g.smClock.add(s.Time, s.SMClockMHz)
	}
	if s.Have(gpu.FieldThrottle) {
		g.throttle = append(g.throttle, gpoint{s.Time, float64(s.Throttle)})
	}
	g.seen.add(s.Time)
	return true
}

// Flush closes every window whose end plus grace has passed at now and
// returns its points, oldest window first.
func (j *Joiner) Flush(now time.Time) []*write.Point {
	w := j.cfg.Window
	if behind := now.Sub(j.next.Add(w + j.cfg.Grace)); behind >= maxCatchUp*w {
		skip := behind.Truncate(w) - (maxCatchUp-1)*w
		j.skipped += uint64(skip / w)
		j.next = j.next.Add(skip)
	}
	var pts []*write.Point
	for !now.Before(j.next.Add(w + j.cfg.Grace)) {
		pts = j.closeWindow(pts, j.next)
		j.next = j.next.Add(w)
	}
	return pts
}

// Close ends observation at now: every window that has begun is closed,
// the last one partial (its coverage says how much). For shutdown and the
// end of a replay.
func (j *Joiner) Close(now time.Time) []*write.Point {
	var pts []*write.Point
	for j.next.Before(now) {
		pts = j.closeWindow(pts, j.next)
		j.next = j.next.Add(j.cfg.Window)
	}
	return pts
}

// gpuWindow is one GPU's summary of one window, shared by its own point and
// the points of the servers it serves.
type gpuWindow struct {
	g        *gpuState
	covered  time.Duration
	util     stats
	smActive stats
	power    stats
	memUsed  stats
	memTotal stats
	energyJ  float64
	hasJ     bool
	// watts is the mean power over the observed stretches, on the same
	// time base as the server's rates (energyJ may hold an increase that
	// landed after a gap).
	watts float64
}

func (j *Joiner) closeWindow(pts []*write.Point, s time.Time) []*write.Point {
	e := s.Add(j.cfg.Window)
	gws := make(map[string]*gpuWindow, len(j.gpus))
	users := j.gpuUsers()
	for _, g := range j.sortedGPUs() {
		gw, pt := j.gpuPoint(g, s, e, users[g.uuid])
		gws[g.uuid] = gw
		pts = append(pts, pt)
	}
	for _, st := range j.servers {
		pts = append(pts, j.serverPoint(st, s, e, gws))
	}
	return pts
}

func (j *Joiner) sortedGPUs() []*gpuState {
	out := make([]*gpuState, 0, len(j.gpus))
	for _, g := range j.gpus {
		out = append(out, g)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].index != out[b].index {
			return out[a].index < out[b].index
		}
		return out[a].instance < out[b].instance
	})
	return out
}

// gpusOf resolves a server's GPU list (indexes or UUIDs) to known GPUs.
func (j *Joiner) gpusOf(st *serverState) []*gpuState {
	var out []*gpuState
	for _, g := range j.sortedGPUs() {
		for _, want := range st.GPUs {
			if (want == "*" && g.instance == "") || want == g.uuid || want == g.label() {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// gpuUsers maps each GPU's UUID to the comma-joined servers using it.
func (j *Joiner) gpuUsers() map[string]string {
	users := make(map[string]string)
	for _, st := range j.servers {
		for _, g := range j.gpusOf(st) {
			if users[g.uuid] != "" {
				users[g.uuid] += ","
			}
			users[g.uuid] += st.Name
		}
	}
	return users
}

func (j *Joiner) gpuPoint(g *gpuState, s, e time.Time, server string) (*gpuWindow, *write.Point) {
	gw := &gpuWindow{g: g, covered: g.seen.covered(s, e, j.cfg.MaxGap)}
	fields := make(map[string]any, 20)
	gw.util = g.util.stats(s, e)
	if gw.util.n > 0 {
		fields[schema.FieldUtil] = gw.util.mean()
		fields[schema.FieldUtilMax] = gw.util.max
	}
	if st := g.memUtil.stats(s, e); st.n > 0 {
		fields[schema.FieldMemUtil] = st.mean()
	}
	gw.memUsed, gw.memTotal = g.memUsed.stats(s, e), g.memTotal.stats(s, e)
	if gw.memUsed.n > 0 {
		fields[schema.FieldMemUsedBytes] = int64(gw.memUsed.max)
		fields[schema.FieldMemTotalBytes] = int64(gw.memTotal.max)
	}
	gw.power = g.power.stats(s, e)
	if gw.power.n > 0 {
		fields[schema.FieldPowerW] = gw.power.mean()
	}
	// Energy from the counter's delta over exactly this window; a GPU
	// without the counter (pre-Volta, replayed CSV) integrates power.
	obsJ, obsSpan := g.energy.observed(s, e, j.cfg.MaxGap)
	if sp, ok := g.energy.close(e, j.cfg.MaxGap); ok && gw.covered > 0 {
		gw.energyJ, gw.hasJ = sp.delta()/1000, true
		if obsSpan > 0 {
			gw.watts = obsJ / 1000 / obsSpan.Seconds()
		}
		fields[schema.FieldEnergySource] = schema.EnergyCounter
	} else if gw.power.n > 0 && gw.covered > 0 {
		gw.energyJ, gw.hasJ = gw.power.mean()*gw.covered.Seconds(), true
		gw.watts = gw.power.mean()
		fields[schema.FieldEnergySource] = schema.EnergyPower
	}
	if gw.hasJ {
		fields[schema.FieldEnergyJ] = gw.energyJ
	}
	gw.smActive = g.smActive.stats(s, e)
	for name, gg := range map[string]*gauge{schema.FieldSMActive: &g.smActive, schema.FieldSMOccupancy: &g.smOcc, schema.FieldTensorActive: &g.tensor, schema.FieldDRAMActive: &g.dram} {
		if st := gg.stats(s, e); st.n > 0 {
			fields[name] = st.mean()
		}
	}
	if st := g.temp.stats(s, e); st.n > 0 {
		fields[schema.FieldTempC] = st.max
	}
	if st := g.smClock.stats(s, e); st.n > 0 {
		fields[schema.FieldSMClockMHz] = st.mean()
	}
	var bits uint64
	n := 0
	for _, p := range g.throttle {
		if !p.t.Before(s) && p.t.Before(e) {
			bits |= uint64(p.v)
			n++
		}
	}
	if n > 0 {
		fields[schema.FieldThrottle] = int64(bits)
	}
	fields[schema.FieldSamples] = int64(g.seen.count(s, e))
	fields[schema.FieldCoverage] = ratio(gw.covered, j.cfg.Window)
	// The window's length travels with it: readers turn windows into time
	// from the data, not from their own configuration.
	fields[schema.FieldWindowS] = j.cfg.Window.Seconds()
	for _, ge := range g.errs {
		if !ge.t.Before(s) && ge.t.Before(e) {
			fields[schema.FieldError] = ge.err.Error()
		}
	}

	for _, gg := range []*gauge{&g.util, &g.memUtil, &g.memUsed, &g.memTotal, &g.power, &g.temp, &g.smClock,
		&g.smActive, &g.smOcc, &g.tensor, &g.dram} {
		gg.prune(e)
	}
	g.throttle = pruneGpoints(g.throttle, e)
	g.errs = pruneErrs(g.errs, e)
	g.seen.prune(e)

	tags := map[string]string{
		schema.TagHost: j.cfg.Host, schema.TagGPU: g.label(), schema.TagUUID: g.uuid, schema.TagName: g.name, schema.TagServer: server,
	}
	return gw, write.NewPoint(schema.GPU, tags, fields, s)
}

func (j *Joiner) serverPoint(st *serverState, s, e time.Time, gws map[string]*gpuWindow) *write.Point {
	m := j.measure(st, s, e)
	fields := make(map[string]any, 24)
	in := verdictInput{down: m.down, tokens: -1, running: m.running, waiting: m.waiting, kv: m.kv, util: -1,
		preempted: m.preempted}
	if m.hasTokens {
		fields[schema.FieldTokens] = m.tokensInt
		in.tokens = m.tokens
		if m.tokenSecs > 0 {
			fields[schema.FieldSystemTPS] = m.rateTokens / m.tokenSecs
		}
	}
	if m.hasUser {
		fields[schema.FieldPerUserTPS] = m.userTPS
	}
	if m.hasPrompt {
		fields[schema.FieldPromptTokens] = m.promptInt
		if m.promptSecs > 0 {
			fields[schema.FieldPromptTPS] = m.ratePrompt / m.promptSecs
		}
	}
	if m.hasPreempt {
		fields[schema.FieldPreemptions] = m.preempt
	}
	for name, v := range map[string]float64{schema.FieldRunning: m.running, schema.FieldWaiting: m.waiting, schema.FieldKVCacheUsage: m.kv} {
		if v >= 0 {
			fields[name] = v
		}
	}

	gpus := j.gpusOf(st)
	idx := make([]string, 0, len(gpus))
	var util, utilMax, power, energy, sm float64
	// watts is the GPUs' mean power over the part of the window each was
	// observed, from their energy: divided into the server's rate over its
	// own observed part, tokens per joule stay on one time base when the
	// two were watched for different stretches (a partial window).
	var watts float64
	var nUtil, nPower, nEnergy, nSM int
	var memUsed, memTotal int64
	var nMem int
	for _, g := range gpus {
		idx = append(idx, g.label())
		gw := gws[g.uuid]
		if gw == nil {
			continue
		}
		if gw.util.n > 0 {
			util += gw.util.mean()
			utilMax = math.Max(utilMax, gw.util.max)
			nUtil++
		}
		if gw.power.n > 0 {
			power += gw.power.mean()
			nPower++
		}
		if gw.smActive.n > 0 {
			sm += gw.smActive.mean()
			nSM++
		}
		if gw.hasJ {
			energy += gw.energyJ
			nEnergy++
			watts += gw.watts
		}
		if gw.memUsed.n > 0 {
			memUsed += int64(gw.memUsed.max)
			memTotal += int64(gw.memTotal.max)
			nMem++
		}
	}
	if nUtil > 0 {
		fields[schema.FieldGPUUtil] = util / float64(nUtil)
		fields[schema.FieldGPUUtilMax] = utilMax
		in.util = util / float64(nUtil)
	}
	if nSM > 0 {
		// SM activity says how much of the GPU works, utilization only
		// that something ran: the verdict takes it where it is known.
		fields[schema.FieldSMActive] = sm / float64(nSM)
		in.util = sm / float64(nSM)
	}
	if nMem > 0 {
		fields[schema.FieldMemUsedBytes] = memUsed
		fields[schema.FieldMemTotalBytes] = memTotal
	}
	if nPower > 0 {
		fields[schema.FieldPowerW] = power
	}
	if nEnergy > 0 {
		fields[schema.FieldEnergyJ] = energy
		if tps, ok := fields[schema.FieldSystemTPS].(float64); ok && watts > 0 {
			fields[schema.FieldTokensPerJoule] = tps / watts
		}
	}
	if tps, ok := fields[schema.FieldSystemTPS].(float64); ok && len(gpus) > 0 {
		fields[schema.FieldTPSPerGPU] = tps / float64(len(gpus))
	}
	fields[schema.FieldState] = verdict(in, j.cfg.Thresholds)
	fields[schema.FieldCoverage] = ratio(m.covered, j.cfg.Window)
	fields[schema.FieldWindowS] = j.cfg.Window.Seconds()
	fields[schema.FieldSource] = m.source

	tags := map[string]string{
		schema.TagHost: j.cfg.Host, schema.TagServer: st.Name, schema.TagEngine: st.Engine, schema.TagModel: st.Model,
		schema.TagGPUs: strings.Join(idx, ","),
	}
	return write.NewPoint(schema.Server, tags, fields, s)
}

func ratio(d, w time.Duration) float64 {
	r := float64(d) / float64(w)
	if r > 1 {
		r = 1
	}
	return r
}

func pruneGpoints(p []gpoint, e time.Time) []gpoint {
	i := 0
	for i < len(p) && p[i].t.Before(e) {
		i++
	}
	return append(p[:0], p[i:]...)
}

func pruneErrs(p []gerr, e time.Time) []gerr {
	i := 0
	for i < len(p) && p[i].t.Before(e) {
		i++
	}
	return append(p[:0], p[i:]...)
}

// measured is what a server's sources say of one window.
type measured struct {
	tokens, prompt       float64
	tokensInt, promptInt int64
	hasTokens, hasPrompt bool
	userTPS              float64
	hasUser              bool
	preempt              int64
	hasPreempt           bool
	preempted            bool
	running, waiting, kv float64 // negative: unknown
	covered              time.Duration
	// The rates' numerators and time base: what was observed over the
	// covered stretches, which differ from tokens and covered when an
	// increase landed after a gap or a window closed ahead of its edge.
	rateTokens, ratePrompt float64
	tokenSecs, promptSecs  float64
	down                   bool
	source                 string
}

// measure closes the window [s, e) of one server. Scraped metrics win;
// the log speaks for windows the metrics did not cover.
func (j *Joiner) measure(st *serverState, s, e time.Time) measured {
	m := measured{running: -1, waiting: -1, kv: -1, source: st.Source}
	if m.source == "" {
		m.source = schema.SourceMetrics
	}
	var spans [collector.NumCounters]span
	var have [collector.NumCounters]bool
	var obs [collector.NumCounters]float64
	var obsSpan [collector.NumCounters]time.Duration
	for c := range collector.NumCounters {
		obs[c], obsSpan[c] = st.counters[c].observed(s, e, j.cfg.MaxGap)
		spans[c], have[c] = st.counters[c].close(e, j.cfg.MaxGap)
	}
	scraped := st.seen.covered(s, e, j.cfg.MaxGap)
	scrapedAny := scraped > 0 || st.seen.count(s, e) > 0
	acc := st.acc[s]
	if acc == nil {
		acc = &windowAcc{}
	}
	for w := range st.acc {
		if !w.After(s) { // this window, and any skipped after a clock jump
			delete(st.acc, w)
		}
	}
	logCover := max(st.watched.covered(s, e, j.cfg.MaxGap), covered(acc.cover))
	logIv := acc.sums[1]
	logAny := logCover > 0 || logIv.n > 0 || st.watched.count(s, e) > 0

	switch {
	case scrapedAny || !logAny:
		m.covered = scraped
		m.down = !scrapedAny
		if m.down {
			break
		}
		iv := acc.sums[0]
		if have[collector.GenerationTokens] || st.completion {
			tok := spans[collector.GenerationTokens]
			m.hasTokens = true
			m.tokens = j.bound(tok.delta() + iv.tokens)
			m.tokensInt = int64(j.bound(float64(tok.count() + st.roundTokens(iv.tokens))))
			m.rateTokens, m.tokenSecs = j.bound(obs[collector.GenerationTokens]+iv.tokens), obsSpan[collector.GenerationTokens].Seconds()
			if !have[collector.GenerationTokens] {
				m.rateTokens, m.tokenSecs = m.tokens, scraped.Seconds()
			}
		}
		if have[collector.ITLSum] && have[collector.ITLCount] {
			if sum, n := spans[collector.ITLSum].delta(), spans[collector.ITLCount].delta(); sum > 0 && n > 0 {
				m.userTPS, m.hasUser = n/sum, true
			}
		}
		if have[collector.PromptTokens] {
			p := spans[collector.PromptTokens]
			m.prompt, m.promptInt, m.hasPrompt = j.bound(p.delta()), int64(j.bound(float64(p.count()))), true
			m.ratePrompt, m.promptSecs = j.bound(obs[collector.PromptTokens]), obsSpan[collector.PromptTokens].Seconds()
		}
		if have[collector.Preemptions] {
			m.preempt, m.hasPreempt = spans[collector.Preemptions].count(), true
			m.preempted = spans[collector.Preemptions].delta() > 0
		}
		gauge := func(g collector.Gauge) float64 {
			if sts := st.gauges[g].stats(s, e); sts.n > 0 {
				return sts.mean()
			}
			return -1
		}
		m.running, m.waiting, m.kv = gauge(collector.Running), gauge(collector.Waiting), gauge(collector.KVUsage)
	default:
		m.source, m.covered = schema.SourceLog, logCover
		iv := logIv
		m.hasTokens = iv.hasTok || logCover > 0
		m.tokens = j.bound(iv.tokens)
		m.tokensInt = int64(j.bound(float64(st.roundTokens(m.tokens))))
		m.rateTokens, m.tokenSecs = m.tokens, logCover.Seconds()
		if iv.hasPrmpt {
			m.prompt = j.bound(iv.prompt)
			m.promptInt, m.hasPrompt = int64(math.Round(m.prompt)), true
			m.ratePrompt, m.promptSecs = m.prompt, logCover.Seconds()
		}
		if iv.hasPreempt {
			m.preempt, m.hasPreempt, m.preempted = int64(math.Round(iv.preempt)), true, iv.preempt > 0
		}
		switch {
		case iv.runW > 0:
			m.running = iv.run / iv.runW
		case iv.reqSec > 0 && logCover > 0:
			m.running = iv.reqSec / logCover.Seconds()
		case logCover > 0 && iv.tokens == 0:
			m.running = 0
		}
		if iv.waitW > 0 {
			m.waiting = iv.wait / iv.waitW
		}
		if iv.kvW > 0 {
			m.kv = iv.kv / iv.kvW
		}
		switch {
		case iv.userSec > 0:
			m.userTPS, m.hasUser = iv.userTok/iv.userSec, true
		case m.running > 0 && logCover > 0 && iv.tokens > 0:
			// A stat line gives only the system rate: each of the running
			// streams got its share.
			m.userTPS, m.hasUser = iv.tokens/logCover.Seconds()/m.running, true
		}
	}
	for g := range collector.NumGauges {
		st.gauges[g].prune(e)
	}
	st.seen.prune(e)
	st.watched.prune(e)
	return m
}

// bound keeps a window's token count within what a server can make in
// it (collector.MaxTokensPerSecond), and not negative, before it becomes
// an integer: validated sources stay inside anyway, this is the last line.
func (j *Joiner) bound(tokens float64) float64 {
	limit := collector.MaxTokensPerSecond * j.cfg.Window.Seconds()
	switch {
	case !(tokens >= 0): // NaN too
		return 0
	case tokens > limit:
		return limit
	}
	return tokens
}

// roundTokens turns fractional interval tokens into integers through a
// running total, so consecutive windows add up to the whole.
func (st *serverState) roundTokens(t float64) int64 {
	before := math.Round(st.ivCum)
	st.ivCum += t
	return int64(math.Round(st.ivCum) - before)
}

// label is the gpu tag: the index, with the MIG instance after a slash.
func (g *gpuState) label() string {
	if g.instance == "" {
		return strconv.Itoa(g.index)
	}
	return strconv.Itoa(g.index) + "/" + g.instance
}
