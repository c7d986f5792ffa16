package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
)

// status is the newest STATUS= in what the daemon told systemd.
func (n *notes) status() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := len(n.msgs) - 1; i >= 0; i-- {
		for _, l := range strings.Split(n.msgs[i], "\n") {
			if s, ok := strings.CutPrefix(l, "STATUS="); ok {
				return s
			}
		}
	}
	return ""
}

// waitFor waits up to d for the first message after the first from that
// starts with prefix, and returns its index.
func (n *notes) waitFor(t *testing.T, from int, prefix string, d time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		n.mu.Lock()
		for i := from; i < len(n.msgs); i++ {
			if strings.HasPrefix(n.msgs[i], prefix) {
				n.mu.Unlock()
				return i
			}
		}
		n.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no %q told to systemd within %v (status %q)", prefix, d, n.status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A reload that changes the GPU backend while the old one fails and is
// retried: the sampler retrying it keeps its own opener, the one started
// after the reload gets the new backend's, and the old one is tried no
// more. The test never synchronises with the retries before the reload,
// so an opener shared between the reloader and the sampler (as before
// the reconfig message carried it) is a data race -race reports.
func TestReloadGPUBackendWhileRetrying(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "200000") // a status beat every 100 ms
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace, cfg.GPU.Interval = time.Second, 100*time.Millisecond, 50*time.Millisecond
	cfg.GPU.Backend = "nvml"
	next := *cfg
	next.GPU.Backend, next.GPU.SimGPUs = "sim", 2
	var tries atomic.Int64
	broken := func() (GPUSampler, error) {
		tries.Add(1)
		return nil, errors.New("NVML: driver not loaded")
	}
	sd := &notes{}
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- newAgent(cfg, Options{OpenGPU: broken, Outputs: []WindowWriter{}, Reload: reload,
			Load: func() (*config.Config, error) { c := next; return &c, nil }},
			hooks{gpuRetry: time.Millisecond, notify: sd.send}).Run(ctx)
	}()
	ready := sd.waitFor(t, 0, "READY=1", 10*time.Second)
	time.Sleep(50 * time.Millisecond) // dozens of tries, unobserved
	sent := time.Now()
	reload <- syscall.SIGHUP
	sd.waitFor(t, ready+1, "READY=1", 10*time.Second)
	applied := time.Since(sent)
	before := tries.Load()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(sd.status(), ", 2 GPUs") {
		if time.Now().After(deadline) {
			t.Fatalf("status %q 10 s after the reload to the sim backend", sd.status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // twenty more retries, were it still tried
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tries of the broken backend; reload applied in %v", before, applied)
	if before < 3 {
		t.Errorf("%d tries of the broken backend before the reload: it was not being retried", before)
	}
	if n := tries.Load(); n != before {
		t.Errorf("the broken backend tried %d times after the reload was applied", n-before)
	}
}

// gate holds every source of a daemon mid-work on demand: scrapes inside
// the server's handler, the GPU sampler inside Sample.
type gate struct {
	hold     atomic.Bool
	release  chan struct{}
	scraping atomic.Int64 // scrapes held now
	sampling atomic.Int64 // Sample calls held now
	samples  atomic.Int64 // Sample calls returned
	released atomic.Bool  // the hold is over (set before hold is cleared)

	mu sync.Mutex
	// By server (URL host): its last scrape served before the hold, and
	// its first after it.
	before, resumed map[string]time.Time
}

// scrapes serves h, holding each request while the gate is held until
// the scrape is cancelled (the daemon stops its sources).
func (g *gate) scrapes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.hold.Load() {
			g.scraping.Add(1)
			<-r.Context().Done()
			g.scraping.Add(-1)
			http.Error(w, "cancelled", http.StatusServiceUnavailable)
			return
		}
		g.mu.Lock()
		if g.before == nil {
			g.before, g.resumed = map[string]time.Time{}, map[string]time.Time{}
		}
		if !g.released.Load() {
			g.before[r.URL.Host] = time.Now()
		} else if _, ok := g.resumed[r.URL.Host]; !ok {
			g.resumed[r.URL.Host] = time.Now()
		}
		g.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// busyGPUs is a GPU backend whose Sample is held while the gate is: a
// driver call that takes its time and cannot be cancelled.
type busyGPUs struct {
	g *gate
	GPUSampler
}

func (b busyGPUs) Sample(now time.Time) []sample.GPU {
	if b.g.hold.Load() {
		b.g.sampling.Add(1)
		<-b.g.release
		b.g.sampling.Add(-1)
	}
	defer b.g.samples.Add(1)
	return b.GPUSampler.Sample(now)
}

// evalLine is a llama-server timing line: 96 tokens in 20 ms.
func evalLine(task int) string {
	return fmt.Sprintf("slot print_timing: id  0 | task %d |        eval time =      20.00 ms /    96 tokens (    0.21 ms per token,  4800.00 tokens per second)\n", task)
}

// A reload while every source is busy: both scrapers inside a request,
// the log tailer reading a log written every 2 ms, the GPU sampler inside
// a driver call. It is applied within a bound (the held driver call, then
// milliseconds), every log line is counted exactly once across it (the
// new tailer resumes where the joiner stood), the scraped servers'
// windows keep their tokens, and the GPUs are sampled again after it.
func TestReloadWhileEverySourceIsBusy(t *testing.T) {
	const rate = 400.0 // tokens/s of each scraped server
	dir := t.TempDir()
	logPath := filepath.Join(dir, "llama.log")
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read from the start, whenever the tailer opens it.
	positions := filepath.Join(dir, "positions")
	os.MkdirAll(positions, 0o700)
	fi, _ := os.Stat(logPath)
	st := fi.Sys().(*syscall.Stat_t)
	if err := tail.NewPositionFile(filepath.Join(positions, "llama.json")).Save(tail.Position{Path: logPath,
		Dev: uint64(st.Dev), Ino: st.Ino}); err != nil {
		t.Fatal(err)
	}

	g := &gate{release: make(chan struct{})}
	sim := &vllmsim.Driven{Rate: rate, Start: time.Now().Add(-time.Hour), ResetAt: time.Now().Add(time.Hour)}
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace = 250*time.Millisecond, 50*time.Millisecond
	cfg.GPU.Interval = 20 * time.Millisecond
	scraped := func(name string) config.ServerConfig {
		return config.ServerConfig{Name: name, Engine: "vllm", MetricsURL: "http://" + name + "/metrics",
			ScrapeInterval: 20 * time.Millisecond, GPUs: []string{"0"}}
	}
	cfg.Servers = []config.ServerConfig{scraped("a"), scraped("b"),
		{Name: "llama", Engine: "llamacpp", Log: config.LogSourceConfig{File: logPath}, GPUs: []string{"1"}}}
	next := *cfg // the same sources; the reload itself is the test
	out := &recorder{}
	sd := &notes{}
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	a := newAgent(cfg, Options{Outputs: []WindowWriter{out}, Reload: reload,
		OpenGPU: func() (GPUSampler, error) {
			return busyGPUs{g, gpusim.New(2, func(time.Time) float64 { return 0.5 })}, nil
		},
		Load: func() (*config.Config, error) { c := next; return &c, nil }},
		// The log's grace is a second, four windows: it bounds how long
		// the machine may stall the tailer before a line is late; a reload
		// that lost or doubled lines, or resumed a second late, still
		// fails. (The 28, 23 and 98 tokens once counted late here, with
		// the reload applied in milliseconds, were the first lines' 20 ms
		// decodes reaching back before the first window when the daemon
		// started just after a window's start: time no window covers,
		// counted apart since.)
		hooks{client: handlerClient(g.scrapes(sim)), notify: sd.send, positionDir: positions,
			logGrace: time.Second, logPoll: 50 * time.Millisecond})
	go func() { done <- a.Run(ctx) }()
	ready := sd.waitFor(t, 0, "READY=1", 10*time.Second)

	// The log, written every 2 ms until stopped.
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines int
	stopWriting := make(chan struct{})
	var wrote sync.WaitGroup
	wrote.Go(func() {
		tk := time.NewTicker(2 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopWriting:
				return
			case <-tk.C:
				if _, err := f.WriteString(evalLine(lines)); err != nil {
					t.Error(err)
					return
				}
				lines++
			}
		}
	})

	// Early in a window, hold every source, then reload.
	time.Sleep(time.Until(time.Now().Truncate(cfg.Window).Add(2*cfg.Window + cfg.Window/4)))
	g.hold.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for g.scraping.Load() < 2 || g.sampling.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("sources not held: %d scrapes, %d samples", g.scraping.Load(), g.sampling.Load())
		}
		time.Sleep(time.Millisecond)
	}
	sent := time.Now()
	reload <- syscall.SIGHUP
	const driverCall = 50 * time.Millisecond
	time.Sleep(driverCall) // the held driver call ends, the scrapes are cancelled
	released := time.Now() // a loaded machine wakes the sleep late: the reload waits for this, not for 50 ms
	g.released.Store(true)
	g.hold.Store(false)
	close(g.release)
	readyAt := sd.told(sd.waitFor(t, ready+1, "READY=1", 10*time.Second))
	samples := g.samples.Load()

	// Two whole windows after the one the sources resumed in (the first
	// scrape of each server after the hold, READY told), and 10 GPU
	// readings after the reload; then the writer stops.
	waitFor(t, "both servers scraped after the hold", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.resumed) == 2
	})
	resumed := readyAt
	for _, s := range []string{"a", "b"} {
		if at := g.firstAfter(t, s); at.After(resumed) {
			resumed = at
		}
	}
	waitFor(t, "two windows after the reload closed, with 10 GPU readings after it", func() bool {
		return out.closedFrom(resumed.Truncate(cfg.Window).Add(2*cfg.Window)) && g.samples.Load()-samples >= 10
	})
	close(stopWriting)
	wrote.Wait()
	// The tailer catches up: every line written was taken by the joiner
	// (the position it saves is at the log's end), however long the
	// machine took; then the stop closes the windows holding them.
	fi, err = f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("the log's %d bytes taken", fi.Size()), func() bool {
		pos, _, _ := tail.LoadPosition(filepath.Join(positions, "llama.json"))
		return pos.Offset == fi.Size()
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Within a bound of the held driver call's end: the reload waits for
	// it (a driver call cannot be cancelled), then takes milliseconds
	// (the scrapes cancelled, the tailer stopped and started again).
	applied := readyAt.Sub(released)
	t.Logf("reload applied %v after the held driver call ended, %v after SIGHUP; %d log lines", applied, readyAt.Sub(sent), lines)
	if bound := 500 * time.Millisecond; applied > bound {
		t.Errorf("reload applied %v after the held driver call ended, want within %v", applied, bound)
	}
	var logTokens int64
	windows := 0
	for _, n := range out.tokensMs("llama") {
		logTokens += n
		windows++
	}
	// The first lines' decodes may begin before the first window, when
	// the daemon started just after a window's start: those tokens are
	// no window's (TestFirstLineBeforeStartIsNotLate).
	before := int64(counted(a.metrics.beforeTokens))
	if before > 96*10 {
		t.Errorf("%d tokens before the first window: more than the lines of the decode's 20 ms", before)
	}
	if want := int64(96*lines) - before; logTokens < want-int64(windows) || logTokens > want+int64(windows) {
		t.Errorf("the log's windows hold %d tokens, want %d (%d lines, %d tokens before the first window): %d lines lost or counted twice (windows %v)",
			logTokens, want, lines, before, (want-logTokens)/96, out.tokensMs("llama"))
	}
	if late := counted(a.metrics.lateTokens); late > 0 {
		t.Errorf("%d tokens late (SIGHUP at %s, the driver call ended at %s, READY at %s)", late,
			sent.Format("15:04:05.000"), released.Format("15:04:05.000"), readyAt.Format("15:04:05.000"))
	}
	// The scraped servers' windows around the reload hold what the
	// servers made in them. The held scrapes leave a gap longer than
	// MaxGap, whose tokens go to the window of the scrape after it: the
	// sum is what is kept, not each window's share. From the window
	// before the one of each server's last scrape before the hold to the
	// one after its first scrape after it (a scrape's time is the middle
	// of its request, which may fall in the next window): how late the
	// machine let the sources be held and resume moves where the gap's
	// tokens land, never how many there are (seen at load 4: the gap
	// began a window before SIGHUP's, and the three windows around
	// SIGHUP held 344 tokens of 300, its 96 among them).
	step := cfg.Window
	for _, s := range []string{"a", "b"} {
		g.mu.Lock()
		last := g.before[s]
		g.mu.Unlock()
		from, to := last.Truncate(step).Add(-step), g.firstAfter(t, s).Truncate(step).Add(step)
		toks := out.tokensMs(s)
		n, k := int64(0), 0
		for w := from; !w.After(to); w = w.Add(step) {
			n += toks[w.UnixMilli()]
			k++
		}
		want := float64(k) * rate * step.Seconds()
		if float64(n) < want*0.9 || float64(n) > want*1.1 {
			t.Errorf("server %s: %d tokens in the %d windows around the reload (%s to %s), want about %.0f (all: %v)",
				s, n, k, from.Format("15:04:05.000"), to.Format("15:04:05.000"), want, toks)
		}
	}
}

// firstAfter is when server's first scrape after the hold was served.
func (g *gate) firstAfter(t *testing.T, server string) time.Time {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.resumed[server]
	if !ok {
		t.Fatalf("server %s: no scrape served after the hold", server)
	}
	return at
}

// closedFrom tells whether a window starting at start or later was
// written.
func (r *recorder) closedFrom(start time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cs {
		if !c.Start.Before(start) {
			return true
		}
	}
	return false
}

// tokensMs returns the tokens of server's windows by start (Unix ms).
func (r *recorder) tokensMs(server string) map[int64]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]int64{}
	for _, c := range r.cs {
		for _, w := range c.Servers {
			if w.Server == server && w.Tokens.OK {
				out[w.Start.UnixMilli()] = w.Tokens.V
			}
		}
	}
	return out
}
