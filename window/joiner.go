// Package window joins GPU samples and server samples in tumbling windows
// aligned to the Unix epoch, and sums each closed window up as typed
// results (GPUWindow, ServerWindow) in tpsmon's schema: time and counters
// only. The analysis stage (package analysis) derives what follows from
// them, the state among it; sink turns them into line protocol. It is pure: no I/O, and the clock is the caller's
// (every method takes the time), so tests need no sleeping.
package window

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/sample"
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
	Start time.Time
}

// Server describes one monitored inference server.
type Server struct {
	Name   string
	Engine string
	Model  string // used until a sample names the model
	// EngineVersion is the engine's version, used until a source names
	// one (NameVersion); empty: unknown, and the windows carry none.
	EngineVersion string
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
	// first is the first window's start: what an interval says of the
	// time before it was never this joiner's to count.
	first        time.Time
	beforeTokens float64
	skipped      uint64
	// retired are servers a reload removed: written for the windows that
	// hold what was observed of them, then forgotten.
	retired []*serverState
}

type serverState struct {
	Server
	counters [sample.NumCounters]counter
	gauges   [sample.NumGauges]gauge
	seen     timeline // successful scrapes
	// acc sums, per window, the intervals from completion-time counters
	// (not Observed) and from log lines (Observed), spread as they come.
	acc map[time.Time]*windowAcc
	// lastAcc is the entry of acc that the last interval went to, at
	// lastW: a log's lines come in order, so most go to the same window.
	lastW   time.Time
	lastAcc *windowAcc
	spare   []*windowAcc // closed windows' accumulators, for reuse
	// completion is set once the server counts tokens at completion: a
	// window without intervals then made 0 tokens, it is not unknown.
	completion bool
	// latency is set once the server gives its inter-token latency: the
	// per-user speed is then that, never the system rate shared out.
	latency bool
	// watched records when the server's log was readable: a silent log is
	// an idle server, not a missing one.
	watched timeline
	ivCum   float64 // running total of interval tokens, for rounding
	// promptCum is ivCum's for prompt tokens: a long prefill's prompt
	// spreads over many windows, which must add up to its line's count.
	promptCum float64
	// engineNamed says the engine tag was detected, not configured.
	engineNamed bool
	hists       [sample.NumHists]histTrack
	// derived marks the counters the collector built, doubted the samples
	// whose counters the Guard refused as no one process's.
	derived [sample.NumCounters]bool
	doubted timeline
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
	j := &Joiner{
		cfg:    cfg,
		next:   Start(cfg.Start, cfg.Window),
		first:  Start(cfg.Start, cfg.Window),
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
// empty; removed ones are still written for the open windows that hold
// what was observed of them (the last one partial, by its coverage), then
// forgotten.
func (j *Joiner) SetServers(servers []Server, maxGap time.Duration) {
	j.cfg.MaxGap = maxGap
	old := j.byName
	prev := append([]*serverState(nil), j.servers...)
	j.servers = j.servers[:0]
	j.byName = make(map[string]*serverState, len(servers))
	for _, s := range servers {
		st, ok := old[s.Name]
		if !ok {
			st = j.unretire(s.Name)
		}
		model, version := st.Model, st.EngineVersion
		st.Server = s
		if s.Model == "" {
			st.Model = model
		}
		if s.EngineVersion == "" {
			st.EngineVersion = version
		}
		j.servers = append(j.servers, st)
		j.byName[s.Name] = st
	}
	for _, st := range prev {
		if _, kept := j.byName[st.Name]; !kept && !st.lastSeen().Before(j.next) {
			j.retired = append(j.retired, st)
		}
	}
}

// unretire takes back a removed server that a reload adds again before
// its last window closed; a fresh state when there is none.
func (j *Joiner) unretire(name string) *serverState {
	for i, st := range j.retired {
		if st.Name == name {
			j.retired = append(j.retired[:i], j.retired[i+1:]...)
			return st
		}
	}
	return &serverState{}
}

// lastSeen is when the server was last heard of: a scrape, the start of
// a window its log's intervals reached, a readable log.
func (st *serverState) lastSeen() time.Time {
	var last time.Time
	for _, tl := range []timeline{st.seen, st.watched} {
		if n := len(tl.ts); n > 0 && tl.ts[n-1].After(last) {
			last = tl.ts[n-1]
		}
	}
	for w := range st.acc {
		if w.After(last) {
			last = w
		}
	}
	return last
}

// Rename gives a server a new name, its source unchanged (a reload that
// renames it): what its open windows hold goes on under the new name,
// rather than being lost with the old one. It reports false when from is
// unknown or to is taken.
func (j *Joiner) Rename(from, to string) bool {
	st, ok := j.byName[from]
	if _, taken := j.byName[to]; !ok || taken {
		return false
	}
	delete(j.byName, from)
	st.Name = to
	j.byName[to] = st
	return true
}

// Late returns how many samples arrived for windows already closed.
func (j *Joiner) Late() uint64 { return j.late }

// Skipped returns how many windows were skipped after a clock jump.
func (j *Joiner) Skipped() uint64 { return j.skipped }

// AddServer records one scrape of a server. It reports false when the
// sample was late (its window had closed) or the server is unknown.
func (j *Joiner) AddServer(name string, s sample.Server) bool {
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
	if !s.Rewind.IsZero() {
		// What the counters said since is in doubt: forgotten, as far as
		// the open windows reach, with the coverage it gave.
		cut := s.Rewind
		if cut.Before(j.next) {
			cut = j.next
		}
		for c := range st.counters {
			st.counters[c].rewind(cut)
		}
		st.seen.rewind(cut)
	}
	for c := range sample.NumCounters {
		if s.HasCounter[c] {
			st.counters[c].add(s.Time, s.Counter[c])
			st.derived[c] = s.Derived[c]
		}
	}
	if s.Suspect {
		st.doubted.add(s.Time)
	}
	for g := range sample.NumGauges {
		if s.HasGauge[g] {
			st.gauges[g].add(s.Time, s.Gauge[g])
		}
	}
	if s.HasCounter[sample.CompletionTokens] {
		st.completion = true
	}
	if s.HasCounter[sample.ITLSum] {
		st.latency = true
	}
	j.addLatencies(st, s)
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
func (j *Joiner) AddLog(name string, iv sample.Interval) bool {
	st, ok := j.byName[name]
	if !ok {
		return false
	}
	if iv.Hole {
		j.addHole(st, iv.Start, iv.End)
		return true
	}
	iv.Observed = true
	return j.addInterval(st, iv)
}

// addHole takes (a, b], which a refused line spoke for, out of the log's
// coverage of the open windows it touches; of closed ones nothing is
// left to take.
func (j *Joiner) addHole(st *serverState, a, b time.Time) {
	if a.Before(j.next) {
		a = j.next
	}
	if !b.After(a) {
		return
	}
	if st.acc == nil {
		st.acc = map[time.Time]*windowAcc{}
	}
	for w := Start(a, j.cfg.Window); w.Before(b); w = w.Add(j.cfg.Window) {
		acc := st.acc[w]
		if acc == nil {
			acc = st.newAcc()
			st.acc[w] = acc
		}
		acc.holes = addCover(acc.holes, latest(a, w), earliest(b, w.Add(j.cfg.Window)))
	}
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// NameEngine sets a server's engine tag when its configuration left it to
// detection.
func (j *Joiner) NameEngine(name, detected string) {
	st, ok := j.byName[name]
	if !ok || detected == "" {
		return
	}
	if st.Engine != "" && !st.engineNamed {
		return // the configuration named it
	}
	// A detected llamacpp becomes ollama once one of Ollama's own lines is
	// read, never back (engine.Refine: the registry says who relays whom).
	st.Engine, st.engineNamed = engine.Refine(st.Engine, detected), true
}

// NameModel sets a server's model tag from its log; a model named by the
// server's metrics or configuration stays.
func (j *Joiner) NameModel(name, model string) {
	if st, ok := j.byName[name]; ok && model != "" && (st.Model == "" || st.Source == schema.SourceLog) {
		st.Model = model
	}
}

// NameVersion sets a server's engine version (the engine_version tag)
// from a source that states it: its log's start-up lines (logline
// Identity.Version), or, for llama.cpp, whose log may not say, its /props
// build_info where that is read. The windows closed from then on carry
// it; a new version (a restart) makes their curve another.
func (j *Joiner) NameVersion(name, version string) {
	if st, ok := j.byName[name]; ok && version != "" {
		st.EngineVersion = version
	}
}

// Watch records that a server's log was readable at t.
func (j *Joiner) Watch(name string, t time.Time) {
	if st, ok := j.byName[name]; ok && !t.Before(j.next) {
		st.watched.add(t)
	}
}

func (j *Joiner) addInterval(st *serverState, iv sample.Interval) bool {
	if !iv.End.After(j.next) && !(iv.End.Equal(j.next) && iv.Start.Equal(iv.End)) {
		j.drop(iv)
		return false
	}
	if iv.Start.Before(j.next) {
		j.drop(iv)
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
	// A request counts in running from when its server took it, which may
	// be windows before its tokens' span (a llama.cpp prompt and slot).
	from := iv.Start
	if iv.Request {
		from = iv.HeldStart()
	}
	first := Start(from, j.cfg.Window)
	if first.Before(j.next) {
		first = j.next
	}
	for w := first; !w.After(iv.End); w = w.Add(j.cfg.Window) {
		e := w.Add(j.cfg.Window)
		if w.Equal(iv.End) && iv.End.After(iv.Start) {
			break // (Start, End] ends exactly at this window's start, and so does its held part
		}
		a := st.lastAcc
		if a == nil || w != st.lastW {
			if a = st.acc[w]; a == nil {
				a = st.newAcc()
				st.acc[w] = a
			}
			st.lastW, st.lastAcc = w, a
		}
		if iv.Observed {
			lo, hi := from, iv.End
			if lo.Before(w) {
				lo = w
			}
			if hi.After(e) {
				hi = e
			}
			a.cover = addCover(a.cover, lo, hi)
		}
		a.sums[k].add(iv, w, e)
		if (iv.Request || iv.Failed) && (iv.End.Before(e) || iv.End.Equal(e) && iv.End.After(iv.Start)) {
			a.addRequest(iv) // the window its line ended in
		}
	}
	return true
}

// drop counts the part of iv before the oldest open window, which no
// window takes. Of it, what falls before the first window is not late:
// the first lines a log is read for speak of the seconds before the
// daemon started (a vLLM stat line of the 10 s before it, a llama.cpp
// request of its whole decode), which no window of this daemon covers.
// The rest fell in windows already closed: late.
func (j *Joiner) drop(iv sample.Interval) {
	end := earliest(iv.End, j.next)
	span := iv.End.Sub(iv.Start)
	tokens := iv.Tokens
	if !(tokens > 0) { // unknown (-1), or NaN: none to count
		tokens = 0
	}
	if span <= 0 { // an instant
		if !end.Before(j.first) {
			j.late++
			j.lateTokens += tokens
		} else {
			j.beforeTokens += tokens
		}
		return
	}
	share := func(a, b time.Time) float64 { // of iv's tokens, those of [a, b)
		if !b.After(a) {
			return 0
		}
		return tokens * float64(b.Sub(a)) / float64(span)
	}
	j.beforeTokens += share(iv.Start, earliest(end, j.first))
	if from := latest(iv.Start, j.first); end.After(from) {
		j.late++
		j.lateTokens += share(from, end)
	}
}

// LateTokens returns the output tokens dropped because they fell in
// windows already closed (long requests reported at their end).
func (j *Joiner) LateTokens() float64 { return j.lateTokens }

// BeforeTokens returns the output tokens dropped because intervals put
// them before the first window: time before the joiner observed.
func (j *Joiner) BeforeTokens() float64 { return j.beforeTokens }

// AddGPU records one reading of one GPU; false when it was late.
func (j *Joiner) AddGPU(s sample.GPU) bool {
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
	case s.Have(sample.FieldUtil):
		g.util.add(s.Time, s.UtilPct)
	}
	if s.Have(sample.FieldGPM) {
		g.smActive.add(s.Time, s.SMActive)
		g.smOcc.add(s.Time, s.SMOccupancy)
		g.tensor.add(s.Time, s.TensorActive)
		g.dram.add(s.Time, s.DRAMActive)
	}
	if s.Have(sample.FieldMemUtil) {
		g.memUtil.add(s.Time, s.MemUtilPct)
	}
	if s.Have(sample.FieldMemory) {
		g.memUsed.add(s.Time, float64(s.MemUsedBytes))
		g.memTotal.add(s.Time, float64(s.MemTotalBytes))
	}
	if s.Have(sample.FieldPower) {
		g.power.add(s.Time, s.PowerW)
	}
	if s.Have(sample.FieldEnergy) {
		g.energy.add(s.Time, float64(s.EnergyMJ))
	}
	if s.Have(sample.FieldTemp) {
		g.temp.add(s.Time, s.TempC)
	}
	if s.Have(sample.FieldSMClock) {
		g.smClock.add(s.Time, s.SMClockMHz)
	}
	if s.Have(sample.FieldThrottle) {
		g.throttle = append(g.throttle, gpoint{s.Time, float64(s.Throttle)})
	}
	g.seen.add(s.Time)
	return true
}

// Flush closes every window whose end plus grace has passed at now and
// returns their results, oldest window first; a window with no GPU and no
// server is left out.
func (j *Joiner) Flush(now time.Time) []Closed {
	w := j.cfg.Window
	if behind := now.Sub(j.next.Add(w + j.cfg.Grace)); behind >= maxCatchUp*w {
		skip := behind.Truncate(w) - (maxCatchUp-1)*w
		j.skipped += uint64(skip / w)
		j.next = j.next.Add(skip)
		for _, st := range j.servers {
			st.dropAccBefore(j.next)
		}
	}
	var out []Closed
	for !now.Before(j.next.Add(w + j.cfg.Grace)) {
		out = j.closeWindow(out, j.next)
		j.next = j.next.Add(w)
	}
	return out
}

// Close ends observation at now: every window that has begun is closed,
// the last one partial (its coverage says how much). For shutdown and the
// end of a replay.
func (j *Joiner) Close(now time.Time) []Closed { return j.CloseAppend(nil, now) }

// CloseAppend is Close appending to dst. The elements of dst past its
// length are overwritten and their slices' storage reused: a caller that
// writes the windows out and truncates dst closes the next ones without
// allocating them (a replay closes tens of thousands).
func (j *Joiner) CloseAppend(dst []Closed, now time.Time) []Closed {
	out := dst
	for j.next.Before(now) {
		out = j.closeWindow(out, j.next)
		j.next = j.next.Add(j.cfg.Window)
	}
	return out
}

// gpuSummary is one GPU's summary of one window, shared by its own result
// and the results of the servers it serves.
type gpuSummary struct {
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

func (j *Joiner) closeWindow(out []Closed, s time.Time) []Closed {
	e := s.Add(j.cfg.Window)
	c := Closed{Start: s}
	if n := len(out); n < cap(out) {
		// Reuse the storage of a closed window the caller is done with.
		old := out[:n+1][n]
		c.GPUs, c.Servers = old.GPUs[:0], old.Servers[:0]
	}
	sums := make(map[string]*gpuSummary, len(j.gpus))
	users := j.gpuUsers()
	for _, g := range j.sortedGPUs() {
		gw, sum := j.gpuWindow(g, s, e, users[g.uuid])
		sums[g.uuid] = sum
		c.GPUs = append(c.GPUs, gw)
	}
	for _, st := range j.servers {
		c.Servers = append(c.Servers, j.serverWindow(st, s, e, sums))
	}
	kept := j.retired[:0]
	for _, st := range j.retired {
		last := st.lastSeen()
		if !last.Before(s) {
			c.Servers = append(c.Servers, j.serverWindow(st, s, e, sums))
		}
		if !last.Before(e) {
			kept = append(kept, st)
		}
	}
	j.retired = kept
	if len(c.GPUs) == 0 && len(c.Servers) == 0 {
		return out
	}
	return append(out, c)
}

func (j *Joiner) sortedGPUs() []*gpuState {
	out := make([]*gpuState, 0, len(j.gpus))
	for _, g := range j.gpus {
		out = append(out, g)
	}
	if len(out) < 2 {
		return out // sort.Slice allocates even for nothing to sort
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
	if len(j.gpus) == 0 {
		return nil // a log's replay closes many windows with no GPU
	}
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

// mean returns a gauge's mean over [s, e), if it was read.
func mean(g *gauge, s, e time.Time) Opt[float64] {
	if st := g.stats(s, e); st.n > 0 {
		return Some(st.mean())
	}
	return Opt[float64]{}
}

func (j *Joiner) gpuWindow(g *gpuState, s, e time.Time, server string) (GPUWindow, *gpuSummary) {
	covered := g.seen.covered(s, e, j.cfg.MaxGap)
	w := GPUWindow{Start: s, Length: j.cfg.Window, Host: j.cfg.Host, Label: g.label(), UUID: g.uuid, Name: g.name,
		Server: server}
	sum := &gpuSummary{util: g.util.stats(s, e), smActive: g.smActive.stats(s, e), power: g.power.stats(s, e),
		memUsed: g.memUsed.stats(s, e), memTotal: g.memTotal.stats(s, e)}
	if sum.util.n > 0 {
		w.Util, w.UtilMax = Some(sum.util.mean()), Some(sum.util.max)
	}
	w.MemUtil = mean(&g.memUtil, s, e)
	if sum.memUsed.n > 0 {
		w.MemUsedBytes, w.MemTotalBytes = Some(int64(sum.memUsed.max)), Some(int64(sum.memTotal.max))
	}
	if sum.power.n > 0 {
		w.PowerW = Some(sum.power.mean())
	}
	w.EnergySource = j.energy(g, sum, s, e, covered)
	if sum.hasJ {
		w.EnergyJ = Some(sum.energyJ)
	}
	w.SMActive, w.SMOccupancy = mean(&g.smActive, s, e), mean(&g.smOcc, s, e)
	w.TensorActive, w.DRAMActive = mean(&g.tensor, s, e), mean(&g.dram, s, e)
	if st := g.temp.stats(s, e); st.n > 0 {
		w.TempC = Some(st.max)
	}
	w.SMClockMHz = mean(&g.smClock, s, e)
	var bits uint64
	n := 0
	for _, p := range g.throttle {
		if !p.t.Before(s) && p.t.Before(e) {
			bits |= uint64(p.v)
			n++
		}
	}
	if n > 0 {
		w.Throttle = Some(int64(bits))
	}
	w.Samples = int64(g.seen.count(s, e))
	w.Coverage = ratio(covered, j.cfg.Window)
	for _, ge := range g.errs {
		if !ge.t.Before(s) && ge.t.Before(e) {
			w.Error = Some(ge.err.Error())
		}
	}
	g.prune(e)
	return w, sum
}

// energy fills sum's energy over [s, e) and says where it came from: the
// counter's delta over exactly this window, or for a GPU without the
// counter (pre-Volta, replayed CSV) integrated power.
func (j *Joiner) energy(g *gpuState, sum *gpuSummary, s, e time.Time, covered time.Duration) Opt[string] {
	obsJ, obsSpan := g.energy.observed(s, e, j.cfg.MaxGap)
	if sp, ok := g.energy.close(e, j.cfg.MaxGap); ok && covered > 0 {
		sum.energyJ, sum.hasJ = sp.delta()/1000, true
		if obsSpan > 0 {
			sum.watts = obsJ / 1000 / obsSpan.Seconds()
		}
		return Some(schema.EnergyCounter)
	}
	if sum.power.n > 0 && covered > 0 {
		sum.energyJ, sum.hasJ = sum.power.mean()*covered.Seconds(), true
		sum.watts = sum.power.mean()
		return Some(schema.EnergyPower)
	}
	return Opt[string]{}
}

// prune forgets a GPU's readings before e.
func (g *gpuState) prune(e time.Time) {
	for _, gg := range []*gauge{&g.util, &g.memUtil, &g.memUsed, &g.memTotal, &g.power, &g.temp, &g.smClock,
		&g.smActive, &g.smOcc, &g.tensor, &g.dram} {
		gg.prune(e)
	}
	g.throttle = pruneGpoints(g.throttle, e)
	g.errs = pruneErrs(g.errs, e)
	g.seen.prune(e)
}

func (j *Joiner) serverWindow(st *serverState, s, e time.Time, sums map[string]*gpuSummary) ServerWindow {
	m := j.measure(st, s, e)
	w := ServerWindow{Start: s, Length: j.cfg.Window, Host: j.cfg.Host, Server: st.Name, Engine: st.Engine,
		EngineVersion: st.EngineVersion, Model: st.Model, Source: m.source, Down: m.down, Preempted: m.preempted, Counts: m.counts, Gauges: m.gauges, CountersDoubted: m.doubted}
	if m.hasTokens {
		w.Tokens, w.ExactTokens = Some(m.tokensInt), Some(m.tokens)
		if m.tokenSecs > 0 {
			w.SystemTPS = Some(m.rateTokens / m.tokenSecs)
		}
	}
	if m.hasUser {
		w.PerUserTPS = Some(m.userTPS)
	}
	if m.hasPrompt {
		w.PromptTokens = Some(m.promptInt)
		if m.promptSecs > 0 {
			w.PromptTPS = Some(m.ratePrompt / m.promptSecs)
		}
	}
	if m.hasPreempt {
		w.Preemptions = Some(m.preempt)
	}
	if m.stepSecs > 0 {
		w.DecodeStepsPerS = Some(m.steps / m.stepSecs)
	}
	known := func(v float64) Opt[float64] { return Opt[float64]{V: v, OK: v >= 0} }
	w.Running, w.Waiting, w.KVCacheUsage = known(m.running), known(m.waiting), known(m.kv)
	j.addGPUs(&w, j.gpusOf(st), sums)
	w.Latency = m.latency
	w.Coverage = ratio(m.covered, j.cfg.Window)
	return w
}

// addGPUs fills a server's window with what its GPUs did: utilization,
// SM activity, memory, power and energy summed or averaged over them, and
// the rates per joule and per GPU.
func (j *Joiner) addGPUs(w *ServerWindow, gpus []*gpuState, sums map[string]*gpuSummary) {
	w.GPUs = make([]string, 0, len(gpus))
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
		w.GPUs = append(w.GPUs, g.label())
		gs := sums[g.uuid]
		if gs == nil {
			continue
		}
		if gs.util.n > 0 {
			util += gs.util.mean()
			utilMax = math.Max(utilMax, gs.util.max)
			nUtil++
		}
		if gs.power.n > 0 {
			power += gs.power.mean()
			nPower++
		}
		if gs.smActive.n > 0 {
			sm += gs.smActive.mean()
			nSM++
		}
		if gs.hasJ {
			energy += gs.energyJ
			nEnergy++
			watts += gs.watts
		}
		if gs.memUsed.n > 0 {
			memUsed += int64(gs.memUsed.max)
			memTotal += int64(gs.memTotal.max)
			nMem++
		}
	}
	if nUtil > 0 {
		w.GPUUtil, w.GPUUtilMax = Some(util/float64(nUtil)), Some(utilMax)
	}
	if nSM > 0 {
		w.SMActive = Some(sm / float64(nSM))
	}
	if nMem > 0 {
		w.MemUsedBytes, w.MemTotalBytes = Some(memUsed), Some(memTotal)
	}
	if nPower > 0 {
		w.PowerW = Some(power)
	}
	if nEnergy > 0 {
		w.EnergyJ = Some(energy)
		if w.SystemTPS.OK && watts > 0 {
			w.TokensPerJoule = Some(w.SystemTPS.V / watts)
		}
	}
	if w.SystemTPS.OK && len(gpus) > 0 {
		w.TPSPerGPU = Some(w.SystemTPS.V / float64(len(gpus)))
	}
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
	// steps over stepSecs is the engine's decode step rate.
	steps, stepSecs         float64
	down                    bool
	source                  string
	finished, aborted       float64
	hasFinished, hasAborted bool
	latency                 Latency
	counts                  [sample.NumCounters]Count
	doubted                 bool
	gauges                  [sample.NumGauges]Opt[float64]
}

// closedCounters is what each counter of a server says of one window.
type closedCounters struct {
	spans   [sample.NumCounters]span
	have    [sample.NumCounters]bool
	obs     [sample.NumCounters]float64
	obsSpan [sample.NumCounters]time.Duration
}

// measure closes the window [s, e) of one server. Scraped metrics win;
// the log speaks for windows the metrics did not cover.
func (j *Joiner) measure(st *serverState, s, e time.Time) measured {
	m := measured{running: -1, waiting: -1, kv: -1, source: st.Source}
	if m.source == "" {
		m.source = schema.SourceMetrics
	}
	// Every counter is closed whichever source speaks: close moves its
	// base to this window's end.
	var cc closedCounters
	for c := range sample.NumCounters {
		cc.obs[c], cc.obsSpan[c] = st.counters[c].observed(s, e, j.cfg.MaxGap)
		cc.spans[c], cc.have[c] = st.counters[c].close(e, j.cfg.MaxGap)
	}
	scraped := st.seen.covered(s, e, j.cfg.MaxGap)
	scrapedAny := scraped > 0 || st.seen.count(s, e) > 0
	acc := st.takeAcc(s)
	var logCover time.Duration
	logIv := acc.sums[1]
	var logAny bool
	if len(acc.holes) == 0 {
		logCover = max(st.watched.covered(s, e, j.cfg.MaxGap), covered(acc.cover))
		logAny = logCover > 0 || logIv.n > 0 || st.watched.count(s, e) > 0
	} else {
		// What refused lines spoke for was not observed, however readable
		// the log was: a window that is all hole knows nothing (down).
		logCover = acc.coverLess(st.watched.segments(acc.cover, s, e, j.cfg.MaxGap))
		logAny = logCover > 0 || logIv.n > 0
	}

	if scrapedAny || !logAny {
		m.covered = scraped
		m.down = !scrapedAny
		if !m.down {
			j.fromMetrics(&m, st, &cc, acc.sums[0], s, e, scraped)
		}
	} else {
		m.source, m.covered = schema.SourceLog, logCover
		j.fromLog(&m, st, logIv, logCover)
	}
	for g := range sample.NumGauges {
		st.gauges[g].prune(e)
	}
	m.doubted = st.doubted.count(s, e) > 0
	st.seen.prune(e)
	st.watched.prune(e)
	m.latency = j.latency(st, acc, &m, s)
	st.doubted.prune(e)
	st.spare = append(st.spare[:min(len(st.spare), maxSpareAcc-1)], acc)
	return m
}

// maxSpareAcc bounds the closed windows' accumulators a server keeps for
// the next windows: a few windows are open at once.
const maxSpareAcc = 4

// newAcc returns an empty accumulator, a closed window's when one is spare
// (its cover's storage kept): a log's windows then cost no allocation.
func (st *serverState) newAcc() *windowAcc {
	n := len(st.spare)
	if n == 0 {
		return &windowAcc{}
	}
	a := st.spare[n-1]
	st.spare = st.spare[:n-1]
	*a = windowAcc{cover: a.cover[:0], holes: a.holes[:0]}
	return a
}

// takeAcc removes and returns the intervals summed for the window at s
// (empty when none). Windows close in order and intervals reach only open
// ones, so no window before s is left (Flush drops those it skips): no
// pass over the map, which holds every window of a replay.
func (st *serverState) takeAcc(s time.Time) *windowAcc {
	acc := st.acc[s]
	if acc == nil {
		return st.newAcc()
	}
	delete(st.acc, s)
	if acc == st.lastAcc {
		st.lastAcc = nil
	}
	return acc
}

// dropAccBefore drops the intervals of the windows before s, skipped
// after a clock jump.
func (st *serverState) dropAccBefore(s time.Time) {
	for w := range st.acc {
		if w.Before(s) {
			delete(st.acc, w)
		}
	}
	st.lastAcc = nil
}

// fromMetrics measures a scraped window: counters' deltas, completion-time
// intervals (iv) on top, gauges' means over [s, e).
func (j *Joiner) fromMetrics(m *measured, st *serverState, cc *closedCounters, iv ivSums, s, e time.Time, scraped time.Duration) {
	if cc.have[sample.GenerationTokens] || st.completion {
		tok := cc.spans[sample.GenerationTokens]
		m.hasTokens = true
		m.tokens = j.bound(tok.delta() + iv.tokens)
		m.tokensInt = int64(j.bound(float64(tok.count() + st.roundTokens(iv.tokens))))
		m.rateTokens, m.tokenSecs = j.bound(cc.obs[sample.GenerationTokens]+iv.tokens), cc.obsSpan[sample.GenerationTokens].Seconds()
		if !cc.have[sample.GenerationTokens] {
			m.rateTokens, m.tokenSecs = m.tokens, scraped.Seconds()
		}
	}
	if cc.have[sample.ITLSum] && cc.have[sample.ITLCount] {
		if sum, n := cc.spans[sample.ITLSum].delta(), cc.spans[sample.ITLCount].delta(); sum > 0 && n > 0 {
			m.userTPS, m.hasUser = n/sum, true
		}
	}
	if cc.have[sample.PromptTokens] {
		p := cc.spans[sample.PromptTokens]
		m.prompt, m.promptInt, m.hasPrompt = j.bound(p.delta()), int64(j.bound(float64(p.count()))), true
		m.ratePrompt, m.promptSecs = j.bound(cc.obs[sample.PromptTokens]), cc.obsSpan[sample.PromptTokens].Seconds()
	}
	if cc.have[sample.FinishedRequests] {
		m.finished, m.hasFinished = cc.spans[sample.FinishedRequests].delta(), true
	}
	if cc.have[sample.AbortedRequests] {
		m.aborted, m.hasAborted = cc.spans[sample.AbortedRequests].delta(), true
	}
	if cc.have[sample.Preemptions] {
		m.preempt, m.hasPreempt = cc.spans[sample.Preemptions].count(), true
		m.preempted = cc.spans[sample.Preemptions].delta() > 0
	}
	for _, c := range []sample.Counter{sample.Decodes, sample.Iterations} {
		if cc.have[c] && cc.obsSpan[c] > 0 {
			m.steps, m.stepSecs = j.bound(cc.obs[c]), cc.obsSpan[c].Seconds()
			break
		}
	}
	gauge := func(g sample.Gauge) float64 {
		if sts := st.gauges[g].stats(s, e); sts.n > 0 {
			return sts.mean()
		}
		return -1
	}
	m.running, m.waiting, m.kv = gauge(sample.Running), gauge(sample.Waiting), gauge(sample.KVUsage)
	for c := range sample.NumCounters {
		if cc.have[c] {
			sp := cc.spans[c]
			m.counts[c] = Count{Delta: j.bound(sp.delta()), Total: sp.end, OK: true, Derived: st.derived[c]}
			if secs := cc.obsSpan[c].Seconds(); secs > 0 {
				m.counts[c].Rate, m.counts[c].RateOK = j.bound(cc.obs[c])/secs, true
			}
		}
	}
	for g := range sample.NumGauges {
		if v := gauge(g); v >= 0 {
			m.gauges[g] = Some(v)
		}
	}
	if !st.latency && m.running > 0 && m.tokenSecs > 0 && m.rateTokens > 0 {
		// Only the system rate (SGLang's gen_throughput on a page without
		// its latency histograms): each running stream got its share.
		m.userTPS, m.hasUser = m.rateTokens/m.tokenSecs/m.running, true
	}
}

// fromLog measures a window only the log spoke for: the sums of the
// intervals its lines covered (iv) over logCover, the time it was watched.
func (j *Joiner) fromLog(m *measured, st *serverState, iv ivSums, logCover time.Duration) {
	m.hasTokens = iv.hasTok || logCover > 0
	m.tokens = j.bound(iv.tokens)
	m.tokensInt = int64(j.bound(float64(st.roundTokens(m.tokens))))
	m.rateTokens, m.tokenSecs = m.tokens, logCover.Seconds()
	if iv.hasPrmpt {
		m.prompt = j.bound(iv.prompt)
		m.promptInt, m.hasPrompt = runningRound(&st.promptCum, m.prompt), true
		m.ratePrompt, m.promptSecs = m.prompt, logCover.Seconds()
	}
	if iv.hasPreempt {
		m.preempt, m.hasPreempt, m.preempted = int64(math.Round(iv.preempt)), true, iv.preempt > 0
	}
	if iv.specDrafted > 0 {
		// The log's speculation tallies stand for the engine's counters
		// (built by tpsmon: no total since the server started).
		m.counts[sample.SpecDraftTokens] = Count{Delta: j.bound(iv.specDrafted), OK: true, Derived: true}
		m.counts[sample.SpecAccepted] = Count{Delta: j.bound(iv.specAccepted), OK: true, Derived: true}
	}
	if iv.hasCached {
		// The log says how much of each prompt the cache held: its prompt
		// lines' tokens are the computed ones (llama.cpp's prompt_n without
		// cache_n, SGLang's #new-token beside #cached-token), so prompt_tps
		// stays their rate.
		comp := Count{Delta: m.prompt, OK: true, Derived: true}
		if m.hasPrompt && m.promptSecs > 0 {
			comp.Rate, comp.RateOK = m.ratePrompt/m.promptSecs, true
		}
		m.counts[sample.PromptComputed] = comp
		m.counts[sample.PromptCached] = Count{Delta: j.bound(iv.cached), OK: true, Derived: true}
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

// bound keeps a window's token count within what a server can make in
// it (sample.MaxTokensPerSecond), and not negative, before it becomes
// an integer: validated sources stay inside anyway, this is the last line.
func (j *Joiner) bound(tokens float64) float64 {
	limit := sample.MaxTokensPerSecond * j.cfg.Window.Seconds()
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
func (st *serverState) roundTokens(t float64) int64 { return runningRound(&st.ivCum, t) }

// runningRound adds t to the running total *cum and returns the integer
// part the total gained.
func runningRound(cum *float64, t float64) int64 {
	before := math.Round(*cum)
	*cum += t
	return int64(math.Round(*cum) - before)
}

// label is the gpu tag: the index, with the MIG instance after a slash.
func (g *gpuState) label() string {
	if g.instance == "" {
		return strconv.Itoa(g.index)
	}
	return strconv.Itoa(g.index) + "/" + g.instance
}
