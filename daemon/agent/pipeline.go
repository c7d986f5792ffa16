package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/collector"
	enginereg "github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/collector/gpumap"
	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
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

// pipeline wires sources, the joiner and the outputs: the daemon's main
// loop, shared by run and demo. Only the main loop touches the joiner.
type pipeline struct {
	cfg *config.Config
	log *slog.Logger
	// openGPU opens the GPU backend; nil for backend none. It is retried
	// while it fails, so a node whose driver comes up late is picked up.
	// The main loop owns it: a reload hands it a new one (reconfig), and
	// each sampler is given the opener it retries.
	openGPU func() (GPUSampler, error)
	outputs []WindowWriter
	// live sees every scrape and GPU reading, for the API's open window;
	// nil: no API.
	live   liveFeed
	now    func() time.Time
	client *http.Client
	// ready and stopping are told when the sources have started and when
	// shutdown begins (systemd notification).
	ready, stopping func()
	// reconf hands the main loop a new configuration (SIGHUP); applied
	// tells the reloader it is in force.
	reconf  chan reconfig
	applied chan struct{}

	// logPoll is how often log files are read; 0 is the tailer's default.
	logPoll time.Duration
	// stopSources is how long shutdown waits for the sources to end.
	stopSources time.Duration
	// attribEvery is how often servers with gpus: auto are placed.
	attribEvery time.Duration
	// gpuRetry is how long a failed GPU backend waits before the next
	// try; 0: defaultGPURetry.
	gpuRetry time.Duration
	// logGrace replaces the configured grace when it is shorter and a
	// server is read from its log; 0 means defaultLogGrace.
	logGrace time.Duration
	// stateDir keeps the end of the last closed window, so that a restart
	// can say which windows no process observed; empty: not kept.
	stateDir     string
	markerFailed bool  // the last marker write failed (said once)
	outFails     []int // per output: failed writes in the current episode
	// posDir keeps the log positions the joiner has accepted; empty: a
	// log is read from its end at each start.
	posDir   string
	logPos   map[string]tail.Position
	logDirty map[string]bool
	gpuErr   map[string]bool     // GPUs whose last reading failed, logged once
	suspect  map[string]bool     // servers whose counters are untrusted now, logged once an episode
	placed   map[string][]string // GPU UUIDs found for servers with gpus: auto

	// metrics are the counters of /metrics, updated where things happen.
	metrics *metrics

	// Liveness for the watchdog: when the main loop last ran, when the
	// last GPU reading arrived, and whether a GPU backend is open.
	loopAt, gpuAt atomic.Int64
	gpuOpen       atomic.Bool
	gpuBackend    atomic.Bool // a GPU backend is configured (not none)
	gpus          atomic.Int64
	unreadable    atomic.Int64
	servers       atomic.Int64

	// srcErr holds why a server's log cannot be read (journalctl's or the
	// file's own error), for the status line and /readyz; unplaced why a
	// server with gpus: auto has no GPUs (gpumap guesses nothing), for
	// /readyz. Both are written on the main loop, read by the endpoint.
	srcErrMu sync.Mutex
	srcErr   map[string]string
	unplaced map[string]string
	// reloadErr is why the last reload was rejected; "" when it was
	// applied (or none came). Written by the reloader, read by the
	// endpoint and the status line, under srcErrMu.
	reloadErr string
}

// reconfig is a reload for the main loop: the configuration, and the GPU
// opener its sampler starts with when newGPU.
type reconfig struct {
	cfg     *config.Config
	openGPU func() (GPUSampler, error)
	newGPU  bool
}

// reloadFailed records why the last reload was rejected (err != nil), or
// that it was applied.
func (p *pipeline) reloadFailed(err error) {
	p.srcErrMu.Lock()
	defer p.srcErrMu.Unlock()
	p.reloadErr = ""
	if err != nil {
		p.reloadErr = err.Error()
	}
}

// lastReloadError is why the last reload was rejected; "" if it was not.
func (p *pipeline) lastReloadError() string {
	p.srcErrMu.Lock()
	defer p.srcErrMu.Unlock()
	return p.reloadErr
}

// sourceFailed records (err != nil) or clears why a server's log source
// cannot be read.
func (p *pipeline) sourceFailed(server string, err error) {
	p.srcErrMu.Lock()
	defer p.srcErrMu.Unlock()
	if err == nil {
		delete(p.srcErr, server)
		return
	}
	if p.srcErr == nil {
		p.srcErr = make(map[string]string)
	}
	p.srcErr[server] = err.Error()
}

// sourceErrors lists "server: reason" for every log source that cannot
// be read, sorted.
func (p *pipeline) sourceErrors() []string {
	p.srcErrMu.Lock()
	defer p.srcErrMu.Unlock()
	return reasons(p.srcErr)
}

// unattributed lists "server: reason" for every server with gpus: auto
// whose GPUs could not be told, sorted.
func (p *pipeline) unattributed() []string {
	p.srcErrMu.Lock()
	defer p.srcErrMu.Unlock()
	return reasons(p.unplaced)
}

// reasons lists "server: reason" for each entry of m, sorted.
func reasons(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for s, why := range m {
		out = append(out, s+": "+why)
	}
	sort.Strings(out)
	return out
}

// liveFeed shows the window still open.
type liveFeed interface {
	Server(name string, s sample.Server)
	GPUs(s []sample.GPU)
}

// message is what a source hands the main loop; each kind applies itself
// to the joiner, on the loop's goroutine.
type message interface {
	apply(p *pipeline, j *window.Joiner, down map[string]bool)
}

// scrapeMsg is one scrape of a server's metrics.
type scrapeMsg collector.Result

// gpuMsg is one reading of every GPU.
type gpuMsg []sample.GPU

// placedMsg says where servers with gpus: auto were found, and why
// others were not.
type placedMsg gpumap.Result

// processLister is a GPU backend that knows the processes on each GPU.
type processLister interface {
	Processes() map[string][]int
}

// attribEvery is how often servers are mapped to GPUs again: processes
// come and go slowly, and NVML's process query is expensive.
const attribEvery = 30 * time.Second

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
}

// startSources starts a scraper per server and the GPU sampler of cfg.
// opened is closed once the GPU backend was tried (or there is none).
func (p *pipeline) startSources(ctx context.Context, cfg *config.Config, msgs chan<- message) (src *sources, opened chan struct{}, err error) {
	ctx, cancel := context.WithCancel(ctx)
	src = &sources{cancel: cancel}
	opened = make(chan struct{})
	send := func(m message) {
		if ctx.Err() != nil {
			return // stopped: the main loop no longer takes what a source says
		}
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}
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
			Dialect: d, Client: p.client, Now: p.now,
			Detected: func(engine string) { p.log.Info("engine detected", "server", name, "engine", engine) }}
		src.wg.Go(func() {
			sc.Run(ctx, func(r collector.Result) { send(scrapeMsg(r)) })
		})
	}
	for _, s := range cfg.Servers {
		if s.Log.File == "" && s.Log.JournalUnit == "" {
			continue
		}
		if err := p.startLog(ctx, src, s, send); err != nil {
			src.stop()
			return nil, nil, err
		}
	}
	p.gpuBackend.Store(p.openGPU != nil)
	if open := p.openGPU; open != nil {
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
// partial and hands them to the outputs.
func (p *pipeline) run(ctx context.Context) error {
	if p.now == nil {
		p.now = time.Now
	}
	cfg := p.cfg
	p.reportGap()
	start := p.now()
	p.logPos, p.logDirty = map[string]tail.Position{}, map[string]bool{}
	p.gpuErr = map[string]bool{}
	p.suspect = map[string]bool{}
	p.placed = map[string][]string{}
	j := window.New(window.Config{
		Window: cfg.Window, Grace: p.grace(cfg), MaxGap: maxGapOfConfig(cfg), Host: cfg.Host, Start: start,
	}, serversOf(cfg))
	p.log.Info("first window", "start", window.Start(start, cfg.Window).Format(time.RFC3339Nano))

	msgs := make(chan message, 64)
	p.servers.Store(int64(len(cfg.Servers)))
	src, opened, err := p.startSources(ctx, cfg, msgs)
	if err != nil {
		return err
	}
	down := make(map[string]bool)
	tickEvery := min(cfg.Window/10, time.Second)
	tick := wake.NewTicker(tickEvery)
	defer tick.Stop()
	p.loopAt.Store(p.now().UnixNano())
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
			m.apply(p, j, down)
		case <-tick.C:
			tick.Next()
			p.flush(j)
		case rc := <-p.reconf:
			src.stop()
			p.drain(msgs, j, down)
			p.reconfigure(rc.cfg, j)
			if rc.newGPU {
				p.openGPU = rc.openGPU // no sampler runs now
			}
			clear(down)
			if src, _, err = p.startSources(ctx, rc.cfg, msgs); err != nil {
				return err
			}
			p.applied <- struct{}{}
		case <-ctx.Done():
			if p.stopping != nil {
				p.stopping()
			}
			if !src.stopWithin(p.stopSources) {
				p.log.Error("sources still running at shutdown; closing the windows without them", "waited", p.stopSources,
					"stacks", ourStacks())
			}
			p.drain(msgs, j, down)
			p.emit(j.Close(p.now()))
			p.savePositions()
			p.metrics.joined(j)
			p.log.Info("sources stopped", "late_samples", j.Late(), "scrapes_malformed", counted(p.metrics.malformed),
				"scrapes_failed", counted(p.metrics.failed))
			return nil
		}
	}
}

// grace is how long windows wait for late data: the configured grace, or
// the log grace where a server is read from its log.
func (p *pipeline) grace(cfg *config.Config) time.Duration {
	grace := cfg.Grace
	if p.logGrace == 0 {
		p.logGrace = defaultLogGrace
	}
	for _, s := range cfg.Servers {
		if (s.Log.File != "" || s.Log.JournalUnit != "") && grace < p.logGrace {
			// A stat line reports the interval before it: windows wait for
			// the line that covers their end.
			grace = p.logGrace
			p.log.Info("grace raised for log sources", "grace", grace)
		}
	}
	return grace
}

// drain takes what stopped sources had already handed over.
func (p *pipeline) drain(msgs <-chan message, j *window.Joiner, down map[string]bool) {
	for {
		select {
		case m := <-msgs:
			m.apply(p, j, down)
		default:
			return
		}
	}
}

// flush writes the windows that closed by now.
func (p *pipeline) flush(j *window.Joiner) {
	pts := j.Flush(p.now())
	p.emit(pts)
	p.metrics.joined(j)
	if len(pts) > 0 {
		// Positions move when windows are written, not every
		// second: lines after them belong to the open window,
		// which a crash loses anyway, so reading them again after
		// one counts them once.
		p.savePositions()
	}
	p.loopAt.Store(p.now().UnixNano())
}

// reconfigure moves the stopped pipeline to nc: renamed servers keep their
// open windows and log positions, and what the sources said is forgotten.
func (p *pipeline) reconfigure(nc *config.Config, j *window.Joiner) {
	for from, to := range renamed(p.cfg, nc) {
		p.rename(j, from, to)
	}
	p.srcErrMu.Lock()
	clear(p.srcErr) // the sources start again and say anew
	clear(p.unplaced)
	p.srcErrMu.Unlock()
	p.cfg = nc
	p.servers.Store(int64(len(nc.Servers)))
	j.SetServers(serversOf(nc), maxGapOfConfig(nc))
	clear(p.placed)
	p.unreadable.Store(0)
}

// rename carries a server's open window and log position to its new name:
// the same source under a new name.
func (p *pipeline) rename(j *window.Joiner, from, to string) {
	j.Rename(from, to)
	if pos, ok := p.logPos[from]; ok {
		p.logPos[to], p.logDirty[to] = pos, p.logDirty[from]
		delete(p.logPos, from)
		delete(p.logDirty, from)
	}
	if f, g := p.positionFile(from), p.positionFile(to); f != "" && g != "" {
		if err := os.Rename(f, g); err != nil && !errors.Is(err, fs.ErrNotExist) {
			p.log.Warn("log position not carried to the new name; its log is read from its end", "server", to, "err", err)
		}
	}
	p.log.Info("server renamed; its open window goes on under the new name", "from", from, "to", to)
}

func (m placedMsg) apply(p *pipeline, j *window.Joiner, _ map[string]bool) {
	p.applyPlacement(j, gpumap.Result(m))
}

func (m gpuMsg) apply(p *pipeline, j *window.Joiner, _ map[string]bool) {
	healthy := false
	for i := range m {
		s := &m[i]
		// Readings no GPU gives are dropped here, before the joiner and
		// the live view see them.
		for _, d := range s.Check() {
			p.metrics.gpuDiscards.Add(gpuLabel(s), d)
		}
		j.AddGPU(*s)
		if s.Err == nil {
			healthy = true
		} else if !p.gpuErr[s.UUID] {
			p.log.Error("GPU unreadable", "gpu", s.Index, "uuid", s.UUID, "err", s.Err)
		}
		p.gpuErr[s.UUID] = s.Err != nil
	}
	// Progress for the watchdog only while some GPU answers: with all
	// of them stuck, a restart is the remedy.
	if healthy {
		p.gpuAt.Store(p.now().UnixNano())
	}
	p.gpus.Store(int64(len(m)))
	if p.live != nil {
		p.live.GPUs(m)
	}
}

// gpuLabel names a GPU on /metrics: its index, and its MIG instance.
func gpuLabel(s *sample.GPU) string {
	if s.Instance != "" {
		return strconv.Itoa(s.Index) + "/" + s.Instance
	}
	return strconv.Itoa(s.Index)
}

func (r scrapeMsg) apply(p *pipeline, j *window.Joiner, down map[string]bool) {
	if r.Err != nil {
		if errors.Is(r.Err, collector.ErrMalformed) {
			p.metrics.malformed.Inc()
		} else {
			p.metrics.failed.Inc()
		}
		if !down[r.Server] {
			p.log.Warn("server unreadable", "server", r.Server, "err", r.Err)
			down[r.Server] = true
			p.unreadable.Add(1)
		}
		return
	}
	if down[r.Server] {
		p.log.Info("server readable again", "server", r.Server)
		down[r.Server] = false
		p.unreadable.Add(-1)
	}
	for _, d := range r.Sample.Discards {
		p.metrics.discards.Add(r.Server, d)
	}
	p.noteSuspect(r)
	j.AddServer(r.Server, r.Sample)
	if p.live != nil {
		p.live.Server(r.Server, r.Sample)
	}
}

// noteSuspect logs once per episode that a server's counters cannot be
// one process's, and when they are followed again.
func (p *pipeline) noteSuspect(r scrapeMsg) {
	switch was := p.suspect[r.Server]; {
	case r.Sample.Suspect && !was:
		series := ""
		for _, d := range r.Sample.Discards {
			if d.Reason == sample.Flap || d.Reason == sample.Suspect {
				series = d.Series
				break
			}
		}
		p.log.Warn("counters go up and down as no single server's do; several replicas behind one URL? "+
			"list each replica as its own server. Their tokens are not counted until they read as one again",
			"server", r.Server, "series", series, "since", r.Sample.Rewind.Format(time.RFC3339Nano))
	case !r.Sample.Suspect && was:
		p.log.Info("counters read as one server's again; counted from here", "server", r.Server)
	}
	if r.Sample.Suspect {
		if p.suspect == nil {
			p.suspect = map[string]bool{}
		}
		p.suspect[r.Server] = true
	} else {
		delete(p.suspect, r.Server)
	}
}

// emit analyses closed windows, with the facts of the configuration in
// force, and hands them to the outputs.
func (p *pipeline) emit(closed []window.Closed) {
	if len(closed) == 0 {
		return
	}
	slo, servers := p.cfg.SLOs()
	cs := analysis.Analyze(closed, &analysis.Facts{Thresholds: p.cfg.Thresholds, SLO: slo, Servers: servers})
	if len(p.outFails) != len(p.outputs) {
		p.outFails = make([]int, len(p.outputs))
	}
	for i, o := range p.outputs {
		// A failing output is logged once per episode, and its end with
		// how many writes failed meanwhile.
		err := o.WriteWindows(cs)
		switch {
		case err != nil && p.outFails[i] == 0:
			p.log.Error("output failed; said once until it works again", "err", err)
		case err == nil && p.outFails[i] > 0:
			p.log.Info("output works again", "failed_writes", p.outFails[i])
		}
		if err != nil {
			p.outFails[i]++
		} else {
			p.outFails[i] = 0
		}
	}
	// Only after the points are spooled: the marker never claims more.
	p.markClosed(cs[len(cs)-1].Start.Add(p.cfg.Window))
}

// sampleGPUs opens the GPU backend with open, retrying while it fails,
// and samples it every interval until ctx ends. tried is closed after the
// first try. Servers with gpus: auto are mapped to their GPUs every
// attribEvery.
func (p *pipeline) sampleGPUs(ctx context.Context, open func() (GPUSampler, error), interval time.Duration, auto []gpumap.Server,
	send func(message), tried chan struct{}) {
	var g GPUSampler
	lastErr := ""
	retry := p.gpuRetry
	if retry <= 0 {
		retry = defaultGPURetry
	}
	for g == nil {
		var err error
		g, err = open()
		if err == nil {
			p.gpuOpen.Store(true)
			p.gpuAt.Store(p.now().UnixNano())
			if s := g.Sample(p.now()); len(s) > 0 {
				p.gpus.Store(int64(len(s)))
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
		p.gpuOpen.Store(false)
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
		if canPlace && len(auto) > 0 && now.Sub(placedAt) >= p.attribEvery {
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

// healthy reports whether the main loop and the GPU sampler made progress
// recently; the watchdog is fed only then, so a stuck joiner or a hung
// driver call ends in a restart by systemd.
func (p *pipeline) healthy(now time.Time, stale time.Duration) bool {
	if now.Sub(time.Unix(0, p.loopAt.Load())) > stale {
		return false
	}
	if p.gpuOpen.Load() && now.Sub(time.Unix(0, p.gpuAt.Load())) > stale {
		return false
	}
	return true
}

// status is the one-line state systemd shows.
func (p *pipeline) status() string {
	s := fmt.Sprintf("monitoring %d servers", p.servers.Load())
	logErrs := p.sourceErrors()
	if n := p.unreadable.Load() + int64(len(logErrs)); n > 0 {
		s += fmt.Sprintf(" (%d unreadable)", n)
	}
	switch {
	case !p.gpuBackend.Load():
		s += ", GPUs not sampled"
	case p.gpuOpen.Load():
		s += fmt.Sprintf(", %d GPUs", p.gpus.Load())
	default:
		s += ", GPU sampling unavailable"
	}
	if len(logErrs) > 0 {
		s += "; " + logErrs[0]
	}
	if p.lastReloadError() != "" {
		s += "; reload rejected, the running configuration stays (see the log)"
	}
	return s
}

const markerName = "last-window"

// markClosed records the end of the newest closed window. Without an
// fsync: the marker only dates the gap a restart reports, and after a
// power loss it may be older or empty (docs/design.md §2).
func (p *pipeline) markClosed(end time.Time) {
	if p.stateDir == "" {
		return
	}
	path, err := statefile.Join(p.stateDir, markerName)
	if err == nil {
		err = statefile.WriteAtomicNoSync(path, []byte(strconv.FormatInt(end.UnixMilli(), 10)+"\n"))
	}
	if err != nil && !p.markerFailed {
		p.log.Warn("window marker not saved", "err", err)
	}
	p.markerFailed = err != nil
}

// reportGap says which windows went unobserved between the last window
// the previous process closed and the window this one starts in: the one
// open at a crash, or the time the daemon was down.
func (p *pipeline) reportGap() {
	if p.stateDir == "" {
		return
	}
	b, err := statefile.Read(filepath.Join(p.stateDir, markerName))
	if err != nil {
		return
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return
	}
	last := time.UnixMilli(ms)
	start := window.Start(p.now(), p.cfg.Window)
	if n := int(start.Sub(last) / p.cfg.Window); n > 0 {
		p.log.Warn("windows not observed: tpsmon was not running", "from", last.UTC().Format(time.RFC3339),
			"to", start.UTC().Format(time.RFC3339), "windows", n)
	}
}

// defaultLogGrace is how long windows wait when a server is read from its
// log: vLLM and LMDeploy print a line every 10 s about the 10 s before it.
const defaultLogGrace = 11 * time.Second

// startLog follows a server's log file or journal unit. Its lines are
// parsed here, in the source's goroutine; the main loop gets intervals.
func (p *pipeline) startLog(ctx context.Context, src *sources, s config.ServerConfig, send func(message)) error {
	r, err := p.newLogReader(s, send)
	if err != nil {
		return err
	}
	name := s.Name
	state := p.positionFile(name)
	if s.Log.File != "" {
		t := &tail.Tailer{Path: s.Log.File, StateFile: state, Log: p.log.With("server", name), Alive: r.alive, Now: p.now, Poll: p.logPoll,
			Peek: r.peek, Flush: r.flush, Failed: func(err error) {
				if err != nil {
					err = fmt.Errorf("log %s: %w", s.Log.File, err) // the status line names the file
				}
				p.sourceFailed(name, err)
			}}
		src.wg.Go(func() {
			if err := t.Run(ctx, r.line); err != nil {
				err = fmt.Errorf("log %s: %w", s.Log.File, err)
				p.log.Error("log unreadable; the server reads as down", "server", name, "err", err)
				p.sourceFailed(name, err)
			}
		})
		return nil
	}
	jn := &tail.Journal{Unit: s.Log.JournalUnit, StateFile: state, Log: p.log.With("server", name), Alive: r.alive, Flush: r.flush,
		Failed: func(err error) { p.sourceFailed(name, err) }}
	src.wg.Go(func() { jn.Run(ctx, r.line) })
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
func (p *pipeline) savePositions() {
	for name := range p.logDirty {
		if f := p.positionFile(name); f != "" {
			if err := tail.SavePosition(f, p.logPos[name]); err != nil {
				p.log.Warn("log position not saved", "server", name, "err", err)
			}
		}
		delete(p.logDirty, name)
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
func (p *pipeline) applyPlacement(j *window.Joiner, res gpumap.Result) {
	servers := serversOf(p.cfg)
	changed := false
	p.srcErrMu.Lock()
	defer p.srcErrMu.Unlock()
	for i := range servers {
		name := servers[i].Name
		if why, ok := res.Unplaced[name]; ok && p.unplaced[name] != why {
			p.log.Warn("GPUs of a server not attributed; its GPUs carry no server until they are (list them in gpus: to fix)",
				"server", name, "why", why)
			if p.unplaced == nil {
				p.unplaced = map[string]string{}
			}
			p.unplaced[name] = why
		}
		pl, ok := res.Placed[name]
		if ok {
			delete(p.unplaced, name)
		}
		if !ok || len(pl.GPUs) == 0 {
			if prev, had := p.placed[name]; had {
				servers[i].GPUs = prev
			}
			continue
		}
		if strings.Join(pl.GPUs, ",") != strings.Join(p.placed[name], ",") {
			p.log.Info("server placed on GPUs", "server", name, "gpus", strings.Join(pl.GPUs, ","), "pid", pl.PID, "by", pl.By)
			changed = true
		}
		p.placed[name] = pl.GPUs
		servers[i].GPUs = pl.GPUs
	}
	if changed {
		j.SetServers(servers, maxGapOfConfig(p.cfg))
	}
}
