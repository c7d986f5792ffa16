package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/window"
	"github.com/tpsmon/tpsmon/nvml"
)

// gpuSampler reads all GPUs of the node at once.
type gpuSampler interface {
	Sample(now time.Time) []nvml.Sample
	Close() error
}

// pointWriter receives the points of closed windows.
type pointWriter interface {
	WritePoints(pts []*write.Point) error
}

// pipeline wires sources, the joiner and the outputs: the daemon's main
// loop, shared by run and demo.
type pipeline struct {
	cfg *Config
	log *slog.Logger
	// openGPU opens the GPU backend; nil for backend none. It is retried
	// while it fails, so a node whose driver comes up late is picked up.
	openGPU func() (gpuSampler, error)
	outputs []pointWriter
	now     func() time.Time
	client  *http.Client
	// ready and stopping are told when the sources have started and when
	// shutdown begins (systemd notification).
	ready, stopping func()

	// stateDir keeps the end of the last closed window, so that a restart
	// can say which windows no process observed; empty: not kept.
	stateDir string

	malformed atomic.Uint64 // scrapes skipped for unparsable metrics text
	failed    atomic.Uint64 // scrapes that did not reach the server
	late      atomic.Uint64 // samples that came after their window closed
}

// event is what sources hand the main loop.
type event struct {
	scrape *collector.Result
	gpus   []nvml.Sample
}

// gpuRetry is how long a failed GPU backend waits before the next try.
const gpuRetry = 30 * time.Second

func (p *pipeline) servers() []window.Server {
	out := make([]window.Server, len(p.cfg.Servers))
	for i, s := range p.cfg.Servers {
		gpus := s.GPUs
		if len(gpus) == 1 && gpus[0] == "auto" {
			// Without process attribution, a lone server owns every GPU;
			// with several, none is guessed.
			gpus = nil
			if len(p.cfg.Servers) == 1 {
				gpus = []string{"*"}
			}
		}
		engine := s.Engine
		if engine == "auto" {
			engine = "vllm"
		}
		out[i] = window.Server{Name: s.Name, Engine: engine, GPUs: gpus, Source: "metrics"}
	}
	return out
}

// run drives everything until ctx ends, then closes the open windows as
// partial and hands them to the outputs.
func (p *pipeline) run(ctx context.Context) error {
	if p.now == nil {
		p.now = time.Now
	}
	cfg := p.cfg
	maxGap := 5 * cfg.GPU.Interval / 2
	for _, s := range cfg.Servers {
		maxGap = max(maxGap, 5*s.ScrapeInterval/2)
	}
	servers := p.servers()
	p.reportGap()
	j := window.New(window.Config{
		Window: cfg.Window, Grace: cfg.Grace, MaxGap: maxGap, Host: cfg.Host, Start: p.now(),
	}, servers)

	events := make(chan event, 64)
	srcCtx, stopSources := context.WithCancel(ctx)
	var wg sync.WaitGroup
	send := func(ev event) {
		select {
		case events <- ev:
		case <-srcCtx.Done():
		}
	}
	for _, s := range cfg.Servers {
		d, err := collector.DialectFor(s.Engine)
		if err != nil {
			stopSources()
			return err
		}
		sc := &collector.Scraper{Server: s.Name, URL: s.MetricsURL, Interval: s.ScrapeInterval,
			Dialect: d, Client: p.client, Now: p.now}
		wg.Go(func() {
			sc.Run(srcCtx, func(r collector.Result) { send(event{scrape: &r}) })
		})
	}
	if p.openGPU != nil {
		wg.Go(func() { p.sampleGPUs(srcCtx, send) })
	}

	tick := time.NewTicker(min(cfg.Window/10, time.Second))
	defer tick.Stop()
	if p.ready != nil {
		p.ready()
	}
	down := make(map[string]bool)
	for {
		select {
		case ev := <-events:
			p.accept(j, ev, down)
		case <-tick.C:
			p.emit(j.Flush(p.now()))
			p.late.Store(j.Late())
		case <-ctx.Done():
			if p.stopping != nil {
				p.stopping()
			}
			stopSources()
			wg.Wait()
			for {
				select {
				case ev := <-events:
					p.accept(j, ev, down)
					continue
				default:
				}
				break
			}
			p.emit(j.Close(p.now()))
			p.late.Store(j.Late())
			p.log.Info("sources stopped", "late_samples", j.Late(), "scrapes_malformed", p.malformed.Load(),
				"scrapes_failed", p.failed.Load())
			return nil
		}
	}
}

func (p *pipeline) accept(j *window.Joiner, ev event, down map[string]bool) {
	if ev.gpus != nil {
		for _, s := range ev.gpus {
			j.AddGPU(s)
		}
		return
	}
	r := ev.scrape
	if r.Err != nil {
		if errors.Is(r.Err, collector.ErrMalformed) {
			p.malformed.Add(1)
		} else {
			p.failed.Add(1)
		}
		if !down[r.Server] {
			p.log.Warn("server unreadable", "server", r.Server, "err", r.Err)
			down[r.Server] = true
		}
		return
	}
	if down[r.Server] {
		p.log.Info("server readable again", "server", r.Server)
		down[r.Server] = false
	}
	j.AddServer(r.Server, r.Sample)
}

func (p *pipeline) emit(pts []*write.Point) {
	if len(pts) == 0 {
		return
	}
	p.markClosed(pts[len(pts)-1].Time().Add(p.cfg.Window))
	for _, o := range p.outputs {
		if err := o.WritePoints(pts); err != nil {
			p.log.Error("output failed", "err", err)
		}
	}
}

// sampleGPUs opens the GPU backend, retrying while it fails, and samples
// it every gpu.interval until ctx ends.
func (p *pipeline) sampleGPUs(ctx context.Context, send func(event)) {
	var g gpuSampler
	lastErr := ""
	for g == nil {
		var err error
		g, err = p.openGPU()
		if err == nil {
			break
		}
		if err.Error() != lastErr {
			p.log.Error("GPU sampling unavailable; monitoring servers only, retrying", "err", err, "every", gpuRetry)
			lastErr = err.Error()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(gpuRetry):
		}
	}
	defer g.Close()
	t := time.NewTicker(p.cfg.GPU.Interval)
	defer t.Stop()
	for {
		send(event{gpus: g.Sample(p.now())})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

const markerName = "last-window"

// markClosed records the end of the newest closed window.
func (p *pipeline) markClosed(end time.Time) {
	if p.stateDir == "" {
		return
	}
	path := filepath.Join(p.stateDir, markerName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(end.UnixMilli(), 10)+"\n"), 0o600); err == nil {
		os.Rename(tmp, path)
	}
}

// reportGap says which windows went unobserved between the last window
// the previous process closed and the window this one starts in: the one
// open at a crash, or the time the daemon was down.
func (p *pipeline) reportGap() {
	if p.stateDir == "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(p.stateDir, markerName))
	if err != nil {
		return
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return
	}
	last := time.UnixMilli(ms)
	start := p.now().Truncate(p.cfg.Window)
	if n := int(start.Sub(last) / p.cfg.Window); n > 0 {
		p.log.Warn("windows not observed: tpsmon was not running", "from", last.UTC().Format(time.RFC3339),
			"to", start.UTC().Format(time.RFC3339), "windows", n)
	}
}
