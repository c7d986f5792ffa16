package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/internal/logging"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/testkit/syncbuf"
)

// gpuWindowsFrom counts the GPU windows starting at or after from that
// hold samples.
func (r *recorder) gpuWindowsFrom(from time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.cs {
		for _, g := range c.GPUs {
			if !g.Start.Before(from) && g.Samples > 0 {
				n++
			}
		}
	}
	return n
}

// TestReloadIsAllOrNothing: a reload whose file would drop keys the
// running file sets (an empty mapping, a truncated save), or that does
// not parse, is refused whole: logged with the keys, counted, on /readyz
// and in the status, the GPU backend and its sampling kept. A reload that
// removes a server, or sets another backend explicitly, is applied.
func TestReloadIsAllOrNothing(t *testing.T) {
	t.Parallel()
	cfgPath := filepath.Join(t.TempDir(), "tpsmon.yaml")
	use := func(fixture string) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("testdata", "reload", fixture))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	use("running.yaml")
	cfg, err := config.Load(cfgPath, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{ReplaceAttr: logging.MaskAttr}))
	out, sd := &recorder{}, &notes{}
	reload := make(chan os.Signal, 1)
	addrc := make(chan net.Addr, 1)
	client := handlerClient(&vllmsim.Driven{Rate: 100, Start: time.Now().Add(-time.Hour), ResetAt: time.Now().Add(time.Hour)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- newAgent(cfg, Options{Log: log, Outputs: []WindowWriter{out}, Reload: reload,
			Load:      func() (*config.Config, error) { return config.Load(cfgPath, true, nil) },
			Listening: func(a net.Addr) { addrc <- a }}, hooks{client: client, notify: sd.send}).Run(ctx)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	base := "http://" + (<-addrc).String()
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	readyIssues := func() []string {
		t.Helper()
		var r struct{ Issues []string }
		if err := json.Unmarshal([]byte(get("/readyz")), &r); err != nil {
			t.Fatal(err)
		}
		return r.Issues
	}
	// reloadWith reloads with fixture and returns the status systemd was
	// told once the daemon is ready again.
	reloadWith := func(fixture string) string {
		t.Helper()
		use(fixture)
		from := sd.len()
		reload <- syscall.SIGHUP
		for deadline := time.Now().Add(5 * time.Second); sd.count(from, sd.len(), "READY=1") == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not ready again after the reload", fixture)
			}
		}
		return sd.lastStatus()
	}
	// sampling waits for GPU windows that start after now, with samples.
	sampling := func(what string) {
		t.Helper()
		after := time.Now()
		for deadline := after.Add(3 * time.Second); out.gpuWindowsFrom(after) < 2; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("%s: no GPU window with samples in the 3 s after it (status %q)", what, sd.lastStatus())
				return
			}
		}
	}
	sampling("start")

	refused := []struct {
		fixture string
		why     []string // what the log's reason names
	}{
		{"empty-map.yaml", []string{"gpu.backend", "servers", "sink.file.path"}},
		{"truncated.yaml", []string{"gpu.backend", "gpu.interval", "servers"}},
		{"unparseable.yaml", []string{"yaml"}},
	}
	for i, tc := range refused {
		status := reloadWith(tc.fixture)
		if !strings.Contains(status, "2 GPUs") || !strings.Contains(status, "monitoring 2 servers") || !strings.Contains(status, "reload rejected") {
			t.Errorf("%s: status %q, want 2 servers, 2 GPUs and the refused reload", tc.fixture, status)
		}
		sampling(tc.fixture)
		issues := strings.Join(readyIssues(), "\n")
		for _, w := range append([]string{"reload rejected"}, tc.why...) {
			if !strings.Contains(issues, w) {
				t.Errorf("%s: /readyz issues %q do not say %q", tc.fixture, issues, w)
			}
		}
		if want := "tpsmon_reload_failures_total " + string(rune('1'+i)); !strings.Contains(get("/metrics"), want) {
			t.Errorf("%s: /metrics lacks %q", tc.fixture, want)
		}
	}
	logged := logBuf.String()
	for _, tc := range refused {
		for _, w := range tc.why {
			if !strings.Contains(logged, w) {
				t.Errorf("the log does not name %q (%s):\n%s", w, tc.fixture, logged)
			}
		}
	}
	if strings.Contains(logged, "hunter2") {
		t.Errorf("the log holds the metrics URL's token:\n%s", logged)
	}

	// Removing a server is a reload like any other; it clears the refusal.
	// (The status says the GPUs again once the new sampler has opened
	// them, on the next beat: the windows say it now.)
	if status := reloadWith("server-removed.yaml"); !strings.Contains(status, "monitoring 1 servers") || strings.Contains(status, "reload rejected") {
		t.Errorf("after removing a server: status %q", status)
	}
	sampling("server-removed.yaml")
	if issues := readyIssues(); len(issues) != 0 {
		t.Errorf("after a good reload, /readyz still says %q", issues)
	}
	// A backend the file names is the backend.
	if status := reloadWith("backend-none.yaml"); !strings.Contains(status, "GPUs not sampled") {
		t.Errorf("after gpu.backend: none: status %q", status)
	}
}

// lastStatus is the newest STATUS= told.
func (n *notes) lastStatus() string {
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

// failingDriver is a GPU backend that never opens, counting its tries.
type failingDriver struct {
	mu    sync.Mutex
	tries int
}

func (d *failingDriver) open() (GPUSampler, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tries++
	return nil, errors.New("NVML: driver not loaded")
}

func (d *failingDriver) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.tries
}

// TestReloadSwitchesFailingGPUBackend: a reload that names another GPU
// backend while the configured one is being retried hands the new
// backend to the sampler it starts, and the one retrying stops. Under
// -race it also holds the reload to writing nothing the retrying sampler
// reads: the test waits on the bubble's clock, not on the driver, so no
// synchronisation orders the sampler's retries before the reload. It runs
// in a bubble (bubble_test.go).
func TestReloadSwitchesFailingGPUBackend(t *testing.T) {
	t.Parallel()
	synctest.Test(t, reloadSwitchesBackend)
}

func reloadSwitchesBackend(t *testing.T) {
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace, cfg.GPU.Interval = 250*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	next := *cfg
	next.GPU.Backend, next.GPU.SimGPUs = "sim", 3
	drv := &failingDriver{}
	out, sd := &recorder{}, &notes{}
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- newAgent(cfg, Options{OpenGPU: drv.open, Outputs: []WindowWriter{out},
			Reload: reload, Load: func() (*config.Config, error) { c := next; return &c, nil }}, hooks{gpuRetry: 10 * time.Millisecond, notify: sd.send}).Run(ctx)
	}()
	time.Sleep(105 * time.Millisecond) // ten retries of the failing backend
	from := sd.len()
	reload <- syscall.SIGHUP
	for sd.count(from, sd.len(), "READY=1") == 0 {
		time.Sleep(time.Millisecond)
	}
	tries, after := drv.count(), time.Now()
	time.Sleep(time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if tries < 5 {
		t.Errorf("the failing backend was tried %d times before the reload, want about 10", tries)
	}
	if n := drv.count(); n != tries {
		t.Errorf("the failing backend was tried %d more times after the reload", n-tries)
	}
	if n := out.gpuWindowsFrom(after); n < 3*3 {
		t.Errorf("%d GPU windows with samples in the second after the reload, want 3 windows of the 3 sim GPUs at least", n)
	}
}
