package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/collector"
	enginereg "github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/collector/gpumap"
	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/modelfacts"
	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/internal/wake"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// GPUSampler reads all GPUs of the node at once.
type GPUSampler interface {
	Sample(now time.Time) []sample.GPU
	Close() error
}

// WindowWriter receives closed windows, analysed.
type WindowWriter interface {
	WriteWindows(cs []analysis.Closed) error
}

// pipeline is the daemon's main loop and its sources (shared by run and
// demo). Its fields are set by New and assemble and only read once Run
// starts the loop: every goroutine may read them. What changes has one
// owner each: the main loop's state is a loop, which only the loop's
// goroutine sees; what the goroutines report about the daemon is health,
// safe for concurrent use; a reload reaches the loop as a reconfig.
type pipeline struct {
	log     *slog.Logger
	now     func() time.Time
	client  *http.Client
	tune    tuning
	outputs []WindowWriter
	// live sees every scrape and GPU reading, for the API's open window;
	// nil: no API.
	live liveFeed
	// stateDir keeps the end of the last closed window, so that a restart
	// can say which windows no process observed; empty: not kept.
	stateDir string
	// posDir keeps the log positions the joiner has accepted; empty: a
	// log is read from its end at each start.
	posDir string
	// metrics are the counters of /metrics, updated where things happen.
	metrics *metrics
	health  *health
	// ready and stopping are told when the sources have started and when
	// shutdown begins (systemd notification).
	ready, stopping func()
	// reconf hands the main loop a new configuration (SIGHUP); applied
	// tells the reloader it is in force.
	reconf  chan reconfig
	applied chan struct{}
}

// tuning are the pipeline's intervals, resolved once in New.
type tuning struct {
	// logPoll is how often log files are read; 0 is the tailer's default.
	logPoll time.Duration
	// logGrace replaces the configured grace when it is shorter and a
	// server is read from its log.
	logGrace time.Duration
	// gpuRetry is how long a failed GPU backend waits before the next try.
	gpuRetry time.Duration
	// attribEvery is how often servers with gpus: auto are placed.
	attribEvery time.Duration
	// stopSources is how long shutdown waits for the sources to end.
	stopSources time.Duration
}

// loop is the main loop's own state: only run's goroutine reads or writes
// it, the messages of the sources included (message.apply).
type loop struct {
	*pipeline
	// cfg is the configuration in force; a reconfig replaces it.
	cfg *config.Config
	// openGPU opens the GPU backend; nil for backend none. It is retried
	// while it fails, so a node whose driver comes up late is picked up.
	// A reconfig replaces it while no sampler runs: each sampler is given
	// the opener it retries.
	openGPU func() (GPUSampler, error)
	j       *window.Joiner
	// down are the servers whose last scrape failed.
	down         map[string]bool
	markerFailed bool  // the last marker write failed (said once)
	outFails     []int // per output: failed writes in the current episode
	logPos       map[string]tail.Position
	logDirty     map[string]bool
	// marker and positions are the state files written every window,
	// in place (statefile.Record); positions by file.
	marker    statefile.Record
	positions map[string]*tail.PositionFile
	gpuErr    map[string]bool     // GPUs whose last reading failed, logged once
	suspect   map[string]bool     // servers whose counters are untrusted now, logged once an episode
	placed    map[string][]string // GPU UUIDs found for servers with gpus: auto
	// serverFacts and gpuSpecs are the decode ceiling's facts: each
	// server's model (from the configuration, read at start and reload)
	// and each GPU's peaks (from the backend, when it opens).
	serverFacts map[string]analysis.ServerFacts
	gpuSpecs    map[string]roofline.Spec
	// engineFacts are what each server's engine said of its model
	// (scrapes, log lines), kept across reloads; factSource is the last
	// source said of each server's facts, so a change is logged once.
	engineFacts map[string]collector.EngineFacts
	factSource  map[string]string
	// lastTick is when the loop last took a tick; held is set while a
	// tick after a stall put off closing windows (afterStall).
	lastTick time.Time
	held     bool
}

// reconfig is a reload for the main loop: the configuration (servers,
// GPU settings, thresholds), and the GPU opener its sampler starts with
// when newGPU. The reloader does not touch cfg once it is sent.
type reconfig struct {
	cfg     *config.Config
	openGPU func() (GPUSampler, error)
	newGPU  bool
}

// liveFeed shows the window still open.
type liveFeed interface {
	Server(name string, s sample.Server)
	GPUs(s []sample.GPU)
}

// message is what a source hands the main loop; each kind applies itself
// to the loop's state, on the loop's goroutine.
type message interface {
	apply(l *loop)
}

// scrapeMsg is one scrape of a server's metrics.
type scrapeMsg collector.Result

// heldMsg is the histograms of a page a scraper held unread when it
// stopped (collector.Scraper.Held).
type heldMsg struct {
	server string
	hists  sample.Server
}

func (m heldMsg) apply(l *loop) { l.j.AddHeld(m.server, m.hists) }

// gpuMsg is one reading of every GPU.
type gpuMsg []sample.GPU

// placedMsg says where servers with gpus: auto were found, and why
// others were not.
type placedMsg gpumap.Result

// devicesMsg is what the GPUs said of themselves when opened: their
// peaks, for the decode ceiling.
type devicesMsg []sample.Device

// deviceFacter is a GPU backend that tells each GPU's memory facts.
type deviceFacter interface {
	Facts() []sample.Device
}

func (m devicesMsg) apply(l *loop) {
	var notes []string
	l.gpuSpecs, notes = modelfacts.GPUs(m)
	for _, n := range notes {
		l.log.Info("GPU peak", "note", n)
	}
}

// setServerFacts reads the model facts of cfg's servers, saying once for
// each server without them why it has no ceiling.
func (l *loop) setServerFacts(cfg *config.Config) {
	var missing map[string]error
	l.serverFacts, missing = modelfacts.Servers(cfg)
	l.factSource = map[string]string{}
	for _, s := range cfg.Servers {
		if _, ok := l.engineFacts[s.Name]; ok {
			l.applyEngineFacts(s)
			continue
		}
		if err := missing[s.Name]; err != nil {
			l.log.Info("no decode ceiling (mbu, ceiling_tps)", "server", s.Name, "missing", err)
		}
	}
}

// engineFactsMsg is what a server's engine said of its model.
type engineFactsMsg struct {
	server string
	facts  collector.EngineFacts
}

func (m engineFactsMsg) apply(l *loop) { l.noteEngineFacts(m.server, m.facts) }

// noteEngineFacts adds what a server's engine said to what it said
// before (a scrape and the log say different facts; the log's KV
// capacity beats cache_config_info's, which undercounts hybrid models)
// and reads the server's facts again.
func (l *loop) noteEngineFacts(server string, f collector.EngineFacts) {
	if l.engineFacts == nil {
		l.engineFacts = map[string]collector.EngineFacts{}
	}
	was := l.engineFacts[server]
	l.engineFacts[server] = mergeEngineFacts(was, f)
	if l.engineFacts[server] == was {
		return
	}
	for _, s := range l.cfg.Servers {
		if s.Name == server {
			l.applyEngineFacts(s)
		}
	}
}

// applyEngineFacts sets server s's facts from its configuration and its
// engine's, logging the sources when they change.
func (l *loop) applyEngineFacts(s config.ServerConfig) {
	r, src, err := modelfacts.WithEngine(s, l.engineFacts[s.Name])
	if err != nil {
		src = "none: " + err.Error()
	}
	if l.factSource[s.Name] != src {
		if l.factSource == nil {
			l.factSource = map[string]string{}
		}
		l.factSource[s.Name] = src
		if err != nil {
			l.log.Info("no decode ceiling (mbu, ceiling_tps)", "server", s.Name, "missing", err)
		} else {
			l.log.Info("decode ceiling facts", "server", s.Name, "source", src)
		}
	}
	if err != nil {
		return
	}
	if l.serverFacts == nil {
		l.serverFacts = map[string]analysis.ServerFacts{}
	}
	f := l.serverFacts[s.Name]
	f.Roofline = r
	l.serverFacts[s.Name] = f
}

// mergeEngineFacts lays what an engine said now over what it said before:
// a fact said now replaces the old one, one not said keeps it.
func mergeEngineFacts(old, now collector.EngineFacts) collector.EngineFacts {
	if now.ModelPath != "" || now.Params > 0 {
		// Another model: its facts come whole.
		old.ModelPath, old.NCtx, old.Slots, old.Params, old.SizeBytes, old.NEmbd, old.NVocab, old.NCtxTrain =
			now.ModelPath, now.NCtx, now.Slots, now.Params, now.SizeBytes, now.NEmbd, now.NVocab, now.NCtxTrain
	}
	if now.KVTokens > 0 && (now.KVTokensFrom == "log" || old.KVTokensFrom != "log") {
		old.KVTokens, old.KVTokensFrom = now.KVTokens, now.KVTokensFrom
	}
	if now.KVDtype != "" {
		old.KVDtype = now.KVDtype
	}
	if now.WeightBytesPerGPU > 0 {
		old.WeightBytesPerGPU = now.WeightBytesPerGPU
	}
	if now.LoggedModel != "" {
		// What one start-up line says of the model goes together.
		old.LoggedModel, old.LoggedModelFrom, old.LoggedRevision, old.LoggedDownloadDir =
			now.LoggedModel, now.LoggedModelFrom, now.LoggedRevision, now.LoggedDownloadDir
	}
	return old
}

// processLister is a GPU backend that knows the processes on each GPU.
type processLister interface {
	Processes() map[string][]int
}

// defaultAttribEvery is how often servers are mapped to GPUs again:
// processes come and go slowly, and NVML's process query is expensive.
const defaultAttribEvery = 30 * time.Second

// defaultGPURetry is how long a failed GPU backend waits before the next
// try.
const defaultGPURetry = 30 * time.Second

func serversOf(cfg *config.Config) []window.Server {
	out := make([]window.Server, len(cfg.Servers))
	for i, s := range cfg.Servers {
		gpus := s.GPUs
		if len(gpus) == 1 && gpus[0] == "auto" {
			// Without process attribution, a lone server owns every GPU;
			// with several, none is guessed.
			gpus = nil
			if len(cfg.Servers) == 1 {
				gpus = []string{"*"}
			}
		}
		engine := s.Engine
		if engine == enginereg.Auto {
			engine = "" // named by the first sample
		}
		source := schema.SourceMetrics
		if s.MetricsURL == "" {
			source = schema.SourceLog
		}
		out[i] = window.Server{Name: s.Name, Engine: engine, GPUs: gpus, Source: source}
	}
	return out
}

func maxGapOfConfig(cfg *config.Config) time.Duration {
	gap := 5 * cfg.GPU.Interval / 2
	for _, s := range cfg.Servers {
		gap = max(gap, 5*s.ScrapeInterval/2)
	}
	return gap
}

// sources is one generation of running sources.
type sources struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// mu guards last: what sources said as they stopped, which the main
	// loop takes once they did (the scrapers' pages held unread).
	mu   sync.Mutex
	last []message
}

func (s *sources) keep(m message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = append(s.last, m)
}

// drainLast applies what the stopped sources said as they stopped.
func (s *sources) drainLast(l *loop) {
	s.mu.Lock()
	last := s.last
	s.last = nil
	s.mu.Unlock()
	for _, m := range last {
		m.apply(l)
	}
}

// startSources starts a scraper per server of cfg, a follower per log
// (from resume's position for its server, when it has one: what the joiner
// took from the sources this generation follows) and a GPU sampler that
// opens the backend with open (nil: none). opened is closed once the GPU
// backend was tried (or there is none). The sources see only the
// pipeline's fixed parts and health, and what they are given here.
func (p *pipeline) startSources(ctx context.Context, cfg *config.Config, open func() (GPUSampler, error),
	resume map[string]tail.Position, msgs chan<- message) (src *sources, opened chan struct{}, err error) {
	ctx, cancel := context.WithCancel(ctx)
	src = &sources{cancel: cancel}
	opened = make(chan struct{})
	// offer hands m to the main loop; false once the sources are stopped,
	// when the main loop no longer takes what a source says.
	offer := func(m message) bool {
		if ctx.Err() != nil {
			return false
		}
		select {
		case msgs <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	send := func(m message) { offer(m) }
	for _, s := range cfg.Servers {
		if s.MetricsURL == "" {
			continue
		}
		d, err := collector.DialectFor(s.Engine)
		if err != nil {
			src.stop()
			return nil, nil, err
		}
		name := s.Name
		sc := &collector.Scraper{Server: s.Name, URL: s.MetricsURL, Interval: s.ScrapeInterval,
			Dialect: d, Client: p.client, Now: p.now, Window: cfg.Window,
			Detected: func(engine string) { p.log.Info("engine detected", "server", name, "engine", engine) }}
		src.wg.Go(func() {
			sc.Run(ctx, func(r collector.Result) { send(scrapeMsg(r)) })
			if h, ok := sc.Held(); ok {
				src.keep(heldMsg{name, h})
			}
		})
	}
	for _, s := range cfg.Servers {
		if s.Log.File == "" && s.Log.JournalUnit == "" {
			continue
		}
		var from *tail.Position
		if pos, ok := resume[s.Name]; ok {
			from = &pos
		}
		// A log's reader holds lines until the tick: what it says as the
		// sources stop is kept for the main loop's drainLast, not dropped.
		keepLate := func(m message) {
			if !offer(m) {
				src.keep(m)
			}
		}
		if err := p.startLog(ctx, src, s, from, keepLate); err != nil {
			src.stop()
			return nil, nil, err
		}
	}
	p.health.gpuBackend.Store(open != nil)
	if open != nil {
		interval := cfg.GPU.Interval
		auto := AutoServers(cfg.Servers)
		src.wg.Go(func() { p.sampleGPUs(ctx, open, interval, auto, send, opened) })
	} else {
		close(opened)
	}
	return src, opened, nil
}

func (s *sources) stop() {
	s.cancel()
	s.wg.Wait()
}

// defaultStopSources is how long shutdown waits for the sources to end:
// each ends at once when told (no read blocks or goes on unbounded), but a
// GPU driver call can hang, and the unit's TimeoutStopSec= (30 s) must
// still leave the final windows and InfluxDB's stopTimeout (10 s).
const defaultStopSources = 5 * time.Second

// stopWithin stops the sources, waiting for them at most d; false when
// some were still running then. Those are left behind: they touch
// nothing the shutdown uses (what they send is not taken after ctx ended).
func (s *sources) stopWithin(d time.Duration) bool {
	s.cancel()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// run drives everything until ctx ends, then closes the open windows as
// partial and hands them to the outputs. cfg and openGPU are the loop's
// from here: a reconfig replaces them.
func (p *pipeline) run(ctx context.Context, cfg *config.Config, openGPU func() (GPUSampler, error)) error {
	l := &loop{pipeline: p, cfg: cfg, openGPU: openGPU, down: map[string]bool{},
		logPos: map[string]tail.Position{}, logDirty: map[string]bool{}, gpuErr: map[string]bool{},
		suspect: map[string]bool{}, placed: map[string][]string{}}
	l.reportGap()
	l.setServerFacts(cfg)
	start := p.now()
	grace, raised := graceFor(cfg, p.tune.logGrace)
	if raised {
		p.log.Info("grace raised for log sources", "grace", grace)
	}
	l.j = window.New(window.Config{
		Window: cfg.Window, Grace: grace, MaxGap: maxGapOfConfig(cfg), Host: cfg.Host, Start: start,
	}, serversOf(cfg))
	p.log.Info("first window", "start", window.Start(start, cfg.Window).Format(time.RFC3339Nano))

	msgs := make(chan message, 64)
	p.health.servers.Store(int64(len(cfg.Servers)))
	src, opened, err := p.startSources(ctx, cfg, l.openGPU, nil, msgs)
	if err != nil {
		return err
	}
	tickEvery := min(cfg.Window/10, time.Second)
	// A tick this long after the one before came after a stall that could
	// make a line read before it late (afterStall).
	stalled := tickEvery + grace/2
	tick := wake.NewTicker(tickEvery)
	defer tick.Stop()
	p.health.loopAt.Store(p.now().UnixNano())
	for {
		select {
		case <-opened:
			// Ready once the GPU backend was tried, so the first status
			// says how many GPUs are sampled.
			if p.ready != nil {
				p.ready()
			}
			opened = nil
		case m := <-msgs:
			m.apply(l)
		case <-tick.C:
			tick.Next()
			// What the sources handed over before this tick goes in before
			// windows close: after a stall (a slow output, a descheduled
			// process) select takes the tick or a waiting message at
			// random, and one taken after the flush would be late.
			for range len(msgs) {
				(<-msgs).apply(l)
			}
			if l.afterStall(p.now(), stalled) {
				continue
			}
			l.flush()
		case rc := <-p.reconf:
			src.stop()
			l.drain(msgs)
			src.drainLast(l)
			l.reconfigure(rc)
			// The logs are read on from where the joiner stands: their
			// saved positions are older, and without a state directory a
			// log would be read from its end, losing what came meanwhile.
			if src, _, err = p.startSources(ctx, l.cfg, l.openGPU, l.logPos, msgs); err != nil {
				return err
			}
			p.applied <- struct{}{}
		case <-ctx.Done():
			if p.stopping != nil {
				p.stopping()
			}
			if !src.stopWithin(p.tune.stopSources) {
				p.log.Error("sources still running at shutdown; closing the windows without them", "waited", p.tune.stopSources,
					"stacks", ourStacks())
			}
			l.drain(msgs)
			src.drainLast(l)
			l.emit(l.j.Close(p.now()))
			l.savePositions()
			p.metrics.joined(l.j)
			p.log.Info("sources stopped", "late_samples", l.j.Late(), "scrapes_malformed", counted(p.metrics.malformed),
				"scrapes_failed", counted(p.metrics.failed))
			return nil
		}
	}
}

// graceFor is how long windows wait for late data: the configured grace,
// or logGrace where a server is read from its log (raised).
func graceFor(cfg *config.Config, logGrace time.Duration) (grace time.Duration, raised bool) {
	grace = cfg.Grace
	for _, s := range cfg.Servers {
		if (s.Log.File != "" || s.Log.JournalUnit != "") && grace < logGrace {
			// A stat line reports the interval before it: windows wait for
			// the line that covers their end.
			grace, raised = logGrace, true
		}
	}
	return grace, raised
}

// afterStall reports a tick that came more than stalled after the one
// before: the loop, or the whole process (a frozen cgroup, a paused VM,
// a starved CI machine), stood still. A source may have read a line just
// before the stall and be handing it over now; were the windows closed on
// this tick, whose clock counts the stall, that line's would already be
// shut and its tokens late. Such a tick closes nothing: the next one
// does, after the sources ran. Never two ticks in a row, so a loop that
// is always slow (a slow output) still closes its windows.
func (l *loop) afterStall(now time.Time, stalled time.Duration) bool {
	last := l.lastTick
	l.lastTick = now
	if l.held || last.IsZero() || now.Sub(last) <= stalled {
		l.held = false
		return false
	}
	l.held = true
	l.health.loopAt.Store(now.UnixNano())
	return true
}

// drain takes what stopped sources had already handed over.
func (l *loop) drain(msgs <-chan message) {
	for {
		select {
		case m := <-msgs:
			m.apply(l)
		default:
			return
		}
	}
}

// flush writes the windows that closed by now.
func (l *loop) flush() {
	pts := l.j.Flush(l.now())
	l.emit(pts)
	l.metrics.joined(l.j)
	if len(pts) > 0 {
		// Positions move when windows are written, not every
		// second: lines after them belong to the open window,
		// which a crash loses anyway, so reading them again after
		// one counts them once.
		l.savePositions()
	}
	l.health.loopAt.Store(l.now().UnixNano())
}

// reconfigure moves the stopped loop to rc: renamed servers keep their
// open windows and log positions, what the sources said is forgotten,
// and the next sampler gets rc's opener when it brings one.
func (l *loop) reconfigure(rc reconfig) {
	nc := rc.cfg
	for from, to := range renamed(l.cfg, nc) {
		l.rename(from, to)
	}
	l.cfg = nc
	l.setServerFacts(nc)
	if rc.newGPU {
		l.openGPU = rc.openGPU // no sampler runs now
	}
	clear(l.down)
	clear(l.placed)
	clear(l.positions) // servers that went keep no entry
	l.j.SetServers(serversOf(nc), maxGapOfConfig(nc))
	l.health.restarted(len(nc.Servers))
}

// rename carries a server's open window and log position to its new name:
// the same source under a new name.
func (l *loop) rename(from, to string) {
	l.j.Rename(from, to)
	if pos, ok := l.logPos[from]; ok {
		l.logPos[to], l.logDirty[to] = pos, l.logDirty[from]
		delete(l.logPos, from)
		delete(l.logDirty, from)
	}
	if f, g := l.positionFile(from), l.positionFile(to); f != "" && g != "" {
		delete(l.positions, f)
		delete(l.positions, g)
		if err := os.Rename(f, g); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.log.Warn("log position not carried to the new name; its log is read from its end", "server", to, "err", err)
		}
	}
	l.log.Info("server renamed; its open window goes on under the new name", "from", from, "to", to)
}

func (m placedMsg) apply(l *loop) {
	l.applyPlacement(gpumap.Result(m))
}

func (m gpuMsg) apply(l *loop) {
	healthy := false
	for i := range m {
		s := &m[i]
		// Readings no GPU gives are dropped here, before the joiner and
		// the live view see them.
		for _, d := range s.Check() {
			l.metrics.gpuDiscards.Add(gpuLabel(s), d)
		}
		l.j.AddGPU(*s)
		if s.Err == nil {
			healthy = true
		} else if !l.gpuErr[s.UUID] {
			l.log.Error("GPU unreadable", "gpu", s.Index, "uuid", s.UUID, "err", s.Err)
		}
		l.gpuErr[s.UUID] = s.Err != nil
	}
	// Progress for the watchdog only while some GPU answers: with all
	// of them stuck, a restart is the remedy.
	if healthy {
		l.health.gpuAt.Store(l.now().UnixNano())
	}
	l.health.gpus.Store(int64(len(m)))
	if l.live != nil {
		l.live.GPUs(m)
	}
}

// gpuLabel names a GPU on /metrics: its index, and its MIG instance.
func gpuLabel(s *sample.GPU) string {
	if s.Instance != "" {
		return strconv.Itoa(s.Index) + "/" + s.Instance
	}
	return strconv.Itoa(s.Index)
}

func (r scrapeMsg) apply(l *loop) {
	if r.Held != nil {
		l.j.AddHeld(r.Server, *r.Held)
	}
	if r.Err != nil {
		if errors.Is(r.Err, collector.ErrMalformed) {
			l.metrics.malformed.Inc()
		} else {
			l.metrics.failed.Inc()
		}
		if !l.down[r.Server] {
			l.log.Warn("server unreadable", "server", r.Server, "err", r.Err)
			l.down[r.Server] = true
			l.health.unreadable.Add(1)
		}
		return
	}
	if l.down[r.Server] {
		l.log.Info("server readable again", "server", r.Server)
		l.down[r.Server] = false
		l.health.unreadable.Add(-1)
	}
	for _, d := range r.Sample.Discards {
		l.metrics.discards.Add(r.Server, d)
	}
	l.noteSuspect(r)
	if r.Facts != nil {
		l.noteEngineFacts(r.Server, *r.Facts)
	}
	l.j.AddServer(r.Server, r.Sample)
	if l.live != nil {
		l.live.Server(r.Server, r.Sample)
	}
}

// noteSuspect logs once per episode that a server's counters cannot be
// one process's, and when they are followed again.
func (l *loop) noteSuspect(r scrapeMsg) {
	switch was := l.suspect[r.Server]; {
	case r.Sample.Suspect && !was:
		series := ""
		for _, d := range r.Sample.Discards {
			if d.Reason == sample.Flap || d.Reason == sample.Suspect {
				series = d.Series
				break
			}
		}
		l.log.Warn("counters go up and down as no single server's do; several replicas behind one URL? "+
			"list each replica as its own server. Their tokens are not counted until they read as one again",
			"server", r.Server, "series", series, "since", r.Sample.Rewind.Format(time.RFC3339Nano))
	case !r.Sample.Suspect && was:
		l.log.Info("counters read as one server's again; counted from here", "server", r.Server)
	}
	if r.Sample.Suspect {
		if l.suspect == nil {
			l.suspect = map[string]bool{}
		}
		l.suspect[r.Server] = true
	} else {
		delete(l.suspect, r.Server)
	}
}

// emit analyses closed windows, with the facts of the configuration in
// force, and hands them to the outputs.
func (l *loop) emit(closed []window.Closed) {
	if len(closed) == 0 {
		return
	}
	slo, perSLO := l.cfg.SLOs()
	servers := l.serverFacts
	if len(perSLO) > 0 {
		servers = maps.Clone(l.serverFacts)
		if servers == nil {
			servers = map[string]analysis.ServerFacts{}
		}
		for name, sf := range perSLO {
			f := servers[name]
			f.SLO = sf.SLO
			servers[name] = f
		}
	}
	cs := analysis.Analyze(closed, &analysis.Facts{Thresholds: l.cfg.Thresholds, Servers: servers, GPUs: l.gpuSpecs, SLO: slo})
	if l.metrics != nil {
		l.metrics.suspects.note(cs, l.log)
	}
	if len(l.outFails) != len(l.outputs) {
		l.outFails = make([]int, len(l.outputs))
	}
	for i, o := range l.outputs {
		// A failing output is logged once per episode, and its end with
		// how many writes failed meanwhile.
		err := o.WriteWindows(cs)
		switch {
		case err != nil && l.outFails[i] == 0:
			l.log.Error("output failed; said once until it works again", "err", err)
		case err == nil && l.outFails[i] > 0:
			l.log.Info("output works again", "failed_writes", l.outFails[i])
		}
		if err != nil {
			l.outFails[i]++
		} else {
			l.outFails[i] = 0
		}
	}
	// Only after the points are spooled: the marker never claims more.
	l.markClosed(cs[len(cs)-1].Start.Add(l.cfg.Window))
}

// sampleGPUs opens the GPU backend with open, retrying while it fails,
// and samples it every interval until ctx ends. tried is closed after the
// first try. Servers with gpus: auto are mapped to their GPUs every
// attribEvery.
func (p *pipeline) sampleGPUs(ctx context.Context, open func() (GPUSampler, error), interval time.Duration, auto []gpumap.Server,
	send func(message), tried chan struct{}) {
	var g GPUSampler
	lastErr := ""
	retry := p.tune.gpuRetry
	for g == nil {
		var err error
		g, err = open()
		if err == nil {
			p.health.gpuOpen.Store(true)
			p.health.gpuAt.Store(p.now().UnixNano())
			if df, ok := g.(deviceFacter); ok {
				send(devicesMsg(df.Facts()))
			}
			if s := g.Sample(p.now()); len(s) > 0 {
				p.health.gpus.Store(int64(len(s)))
				send(gpuMsg(s))
			}
		}
		if tried != nil {
			close(tried)
			tried = nil
		}
		if err == nil {
			break
		}
		if err.Error() != lastErr {
			p.log.Error("GPU sampling unavailable; monitoring servers only, retrying", "err", err, "every", retry)
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
	}
	defer func() {
		p.health.gpuOpen.Store(false)
		g.Close()
	}()
	t := wake.NewTicker(interval)
	defer t.Stop()
	lister, canPlace := g.(processLister)
	var placedAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Next()
		}
		now := p.now()
		smp := g.Sample(now)
		send(gpuMsg(smp))
		if canPlace && len(auto) > 0 && now.Sub(placedAt) >= p.tune.attribEvery {
			placedAt = now
			if res, ok := p.place(lister, smp, auto); ok {
				send(placedMsg(res))
			}
		}
	}
}

// procRoot is where the process tree is read.
const procRoot = "/proc"

// place maps servers to GPUs from NVML's processes and /proc.
func (p *pipeline) place(l processLister, smp []sample.GPU, auto []gpumap.Server) (gpumap.Result, bool) {
	procs := l.Processes()
	var gpus []gpumap.GPU
	for _, s := range smp {
		if s.Instance == "" {
			gpus = append(gpus, gpumap.GPU{Index: s.Index, UUID: s.UUID, PIDs: procs[s.UUID]})
		}
	}
	res, err := gpumap.Resolve(procRoot, auto, gpus)
	if err != nil {
		p.log.Warn("GPU attribution failed", "err", err)
		return res, false
	}
	return res, true
}

// AutoServers are the servers whose GPUs are found (gpus: auto), by
// their port.
func AutoServers(servers []config.ServerConfig) []gpumap.Server {
	var out []gpumap.Server
	for _, s := range servers {
		if len(s.GPUs) != 1 || s.GPUs[0] != "auto" || s.MetricsURL == "" {
			continue
		}
		u, err := url.Parse(s.MetricsURL)
		if err != nil {
			continue
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			port = map[string]int{"http": 80, "https": 443}[u.Scheme]
		}
		out = append(out, gpumap.Server{Name: s.Name, Port: port})
	}
	return out
}

const markerName = "last-window"

// markClosed records the end of the newest closed window. Without an
// fsync: the marker only dates the gap a restart reports, and after a
// power loss it may be older or empty (docs/design.md §2).
func (l *loop) markClosed(end time.Time) {
	if l.stateDir == "" {
		return
	}
	var err error
	if l.marker.Path == "" {
		l.marker.Path, err = statefile.Join(l.stateDir, markerName)
	}
	if err == nil {
		err = l.marker.Write([]byte(strconv.FormatInt(end.UnixMilli(), 10) + "\n"))
	}
	if err != nil && !l.markerFailed {
		l.log.Warn("window marker not saved", "err", err)
	}
	l.markerFailed = err != nil
}

// reportGap says which windows went unobserved between the last window
// the previous process closed and the window this one starts in: the one
// open at a crash, or the time the daemon was down.
func (l *loop) reportGap() {
	if l.stateDir == "" {
		return
	}
	b, err := statefile.ReadRecord(filepath.Join(l.stateDir, markerName))
	if err != nil {
		return
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return
	}
	last := time.UnixMilli(ms)
	start := window.Start(l.now(), l.cfg.Window)
	if n := int(start.Sub(last) / l.cfg.Window); n > 0 {
		l.log.Warn("windows not observed: tpsmon was not running", "from", last.UTC().Format(time.RFC3339),
			"to", start.UTC().Format(time.RFC3339), "windows", n)
	}
}

// defaultLogGrace is how long windows wait when a server is read from its
// log: vLLM and LMDeploy print a line every 10 s about the 10 s before it.
const defaultLogGrace = 11 * time.Second

// startLog follows a server's log file or journal unit, from resume when
// set. Its lines are parsed here, in the source's goroutine; the main loop
// gets intervals.
func (p *pipeline) startLog(ctx context.Context, src *sources, s config.ServerConfig, resume *tail.Position,
	send func(message)) error {
	r, err := p.newLogReader(s, send)
	if err != nil {
		return err
	}
	name := s.Name
	state := p.positionFile(name)
	if s.Log.File != "" {
		t := &tail.Tailer{Path: s.Log.File, StateFile: state, Resume: resume, Log: p.log.With("server", name), Alive: r.alive, Now: p.now, Poll: p.tune.logPoll,
			Peek: r.peek, Flush: r.flush, Failed: func(err error) {
				r.failed(err)
				if err != nil {
					err = fmt.Errorf("log %s: %w", s.Log.File, err) // the status line names the file
				}
				p.health.sourceFailed(name, err)
			}}
		src.wg.Go(func() {
			err := t.Run(ctx, r.line)
			r.handOver() // what waited for a tick
			if err != nil {
				err = fmt.Errorf("log %s: %w", s.Log.File, err)
				p.log.Error("log unreadable; the server reads as down", "server", name, "err", err)
				p.health.sourceFailed(name, err)
			}
		})
		return nil
	}
	jn := &tail.Journal{Unit: s.Log.JournalUnit, StateFile: state, Resume: resume, Log: p.log.With("server", name), Alive: r.alive, Flush: r.flush,
		Failed: func(err error) { r.failed(err); p.health.sourceFailed(name, err) }}
	src.wg.Go(func() {
		jn.Run(ctx, r.line)
		r.handOver() // what waited for a tick
	})
	return nil
}

// positionFile is where a server's log position is kept; "" when there
// is no state directory. The name is encoded (statefile.FileName: a
// server may be called team/llama) and the file is always directly in
// posDir.
func (p *pipeline) positionFile(server string) string {
	if p.posDir == "" {
		return ""
	}
	f, err := statefile.Join(p.posDir, statefile.FileName(server)+".json")
	if err != nil { // FileName's names always join; kept for the proof
		p.log.Error("log position has no file", "server", server, "err", err)
		return ""
	}
	return f
}

// savePositions writes the positions of the log lines the joiner took.
func (l *loop) savePositions() {
	for name := range l.logDirty {
		if f := l.positionFile(name); f != "" {
			pf := l.positions[f]
			if pf == nil {
				if l.positions == nil {
					l.positions = map[string]*tail.PositionFile{}
				}
				pf = tail.NewPositionFile(f)
				l.positions[f] = pf
			}
			if err := pf.Save(l.logPos[name]); err != nil {
				l.log.Warn("log position not saved", "server", name, "err", err)
			}
		}
		delete(l.logDirty, name)
	}
}

// renamed pairs the servers of old that new names differently, with the
// same source (metrics URL, log file and journal unit): old name -> new.
// A source that several servers share is not paired.
func renamed(old, new *config.Config) map[string]string {
	key := func(s config.ServerConfig) string {
		return s.MetricsURL + "\x00" + s.Log.File + "\x00" + s.Log.JournalUnit
	}
	gone := map[string][]string{} // source -> names new lacks
	for _, s := range old.Servers {
		if !slices.ContainsFunc(new.Servers, func(n config.ServerConfig) bool { return n.Name == s.Name }) {
			gone[key(s)] = append(gone[key(s)], s.Name)
		}
	}
	added := map[string][]string{} // source -> names old lacks
	for _, s := range new.Servers {
		if !slices.ContainsFunc(old.Servers, func(o config.ServerConfig) bool { return o.Name == s.Name }) {
			added[key(s)] = append(added[key(s)], s.Name)
		}
	}
	out := map[string]string{}
	for k, from := range gone {
		if to := added[k]; len(from) == 1 && len(to) == 1 && k != "\x00\x00" {
			out[from[0]] = to[0]
		}
	}
	return out
}

// applyPlacement gives servers with gpus: auto the GPUs found for them;
// a server not found keeps what it had. Why a server could not be placed
// is logged when it changes and shown on /readyz until it is placed.
func (l *loop) applyPlacement(res gpumap.Result) {
	servers := serversOf(l.cfg)
	changed := false
	for i := range servers {
		name := servers[i].Name
		if why, ok := res.Unplaced[name]; ok && l.health.unplacedFor(name, why) {
			l.log.Warn("GPUs of a server not attributed; its GPUs carry no server until they are (list them in gpus: to fix)",
				"server", name, "why", why)
		}
		pl, ok := res.Placed[name]
		if ok {
			l.health.placedNow(name)
		}
		if !ok || len(pl.GPUs) == 0 {
			if prev, had := l.placed[name]; had {
				servers[i].GPUs = prev
			}
			continue
		}
		if strings.Join(pl.GPUs, ",") != strings.Join(l.placed[name], ",") {
			l.log.Info("server placed on GPUs", "server", name, "gpus", strings.Join(pl.GPUs, ","), "pid", pl.PID, "by", pl.By)
			changed = true
		}
		l.placed[name] = pl.GPUs
		servers[i].GPUs = pl.GPUs
	}
	if changed {
		l.j.SetServers(servers, maxGapOfConfig(l.cfg))
	}
}
