package agent

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/sdnotify"
)

// lateDriver is a GPU backend whose listed tries to open fail, like a
// driver that is not loaded yet.
type lateDriver struct {
	mu    sync.Mutex
	tries int
	fail  map[int]bool
}

func (d *lateDriver) open() (GPUSampler, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tries++
	if d.fail[d.tries] {
		return nil, errors.New("NVML: driver not loaded")
	}
	return gpusim.New(2, func(time.Time) float64 { return 0 }), nil
}

// lastStatus is the newest STATUS= systemd was told.
func lastStatus(sock *sdnotify.Socket) string {
	msgs := sock.All()
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, l := range strings.Split(msgs[i], "\n") {
			if s, ok := strings.CutPrefix(l, "STATUS="); ok {
				return s
			}
		}
	}
	return ""
}

func waitStatus(t *testing.T, sock *sdnotify.Socket, part string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(lastStatus(sock), part) {
		if time.Now().After(deadline) {
			t.Fatalf("status %q, still without %q after 10 s", lastStatus(sock), part)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The status systemd shows is the present: a GPU backend that comes up
// late, at start or after a reload, shows as sampled once it samples.
func TestStatusFollowsGPUBackend(t *testing.T) {
	sock := sdnotify.Listen(t)
	t.Setenv("NOTIFY_SOCKET", sock.Path)
	t.Setenv("WATCHDOG_USEC", "1000000") // a status beat every 500 ms
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace, cfg.GPU.Interval = time.Second, 100*time.Millisecond, 100*time.Millisecond
	drv := &lateDriver{fail: map[int]bool{1: true, 3: true}} // at start, and at the reload
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- newAgent(cfg, Options{OpenGPU: drv.open, Outputs: []WindowWriter{},
			Reload: reload, Load: func() (*config.Config, error) { c := *cfg; return &c, nil }}, hooks{gpuRetry: 200 * time.Millisecond}).Run(ctx)
	}()
	ready := sock.WaitFor(t, 0, "READY=1")
	if s := lastStatus(sock); !strings.Contains(s, "GPU sampling unavailable") {
		t.Errorf("first status %q while the driver is not loaded", s)
	}
	waitStatus(t, sock, ", 2 GPUs")

	reload <- syscall.SIGHUP
	sock.WaitFor(t, ready+1, "READY=1")
	waitStatus(t, sock, ", 2 GPUs")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if drv.tries != 4 {
		t.Errorf("%d tries to open the GPUs, want 4", drv.tries)
	}
}
