//go:build cgo

package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
)

// The flood test's daemon: the open-file limit, the timeouts it is given
// and the connections it is flooded with.
const (
	floodNofile = 128
	floodCap    = floodNofile / 4 // http.max_connections 1000, lowered to the limit's quarter
	floodIdle   = 500 * time.Millisecond
	floodWaves  = 6
	floodWave   = 100 // connections per wave, every floodEvery
	floodEvery  = 250 * time.Millisecond
)

// runFloodRole runs the daemon with RLIMIT_NOFILE at floodNofile (soft and
// hard, as `LimitNOFILE=128` or prlimit would), short HTTP timeouts and
// http.max_connections above what the limit allows, scraping the vLLM
// server on TPSMON_TEST_PORT, until stdin closes. It prints where it
// listens, then its windows as line protocol; it logs JSON to stderr.
func runFloodRole() error {
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: floodNofile, Max: floodNofile}); err != nil {
		return fmt.Errorf("setrlimit: %w", err)
	}
	cfg, err := config.Load("", false, nil)
	if err != nil {
		return err
	}
	cfg.HTTP.Listen, cfg.HTTP.MaxConnections = "127.0.0.1:0", 1000
	cfg.Discovery.Enabled = false
	cfg.Window, cfg.Grace = 500*time.Millisecond, 100*time.Millisecond
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", GPUs: []string{"auto"},
		MetricsURL: "http://127.0.0.1:" + os.Getenv("TPSMON_TEST_PORT") + "/metrics", ScrapeInterval: 100 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	a := New(cfg, Options{
		Log:       slog.New(slog.NewJSONHandler(os.Stderr, nil)),
		OpenGPU:   func() (GPUSampler, error) { return gpusim.New(1, func(time.Time) float64 { return 0.5 }), nil },
		Outputs:   []WindowWriter{lockedWriter{&mu, out}},
		Listening: func(addr net.Addr) { mu.Lock(); fmt.Fprintf(out, "listening %s\n", addr); out.Flush(); mu.Unlock() },
	})
	a.http.Idle, a.http.ReadHeader = floodIdle, floodIdle
	return a.Run(ctx)
}

// lockedWriter writes windows as line protocol to w, whole, under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bufio.Writer
}

func (l lockedWriter) WriteWindows(cs []analysis.Closed) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := sink.NewLPWriter(l.w).WriteWindows(cs); err != nil {
		return err
	}
	return l.w.Flush()
}

var stateRe = regexp.MustCompile(`state="(\w+)"`)

// TestHTTPFloodLeavesScrapesAndProbes floods the HTTP endpoint of a daemon
// whose open-file limit is 128 with waves of connections (half of them
// idle keep-alive after one request, half silent), far more than it may
// hold: it holds no more than its cap, its scrapes go on (no window
// down), /healthz answers throughout, a cap reached is one log line, and
// every connection is closed by the daemon within its timeouts.
func TestHTTPFloodLeavesScrapesAndProbes(t *testing.T) {
	t.Parallel()
	// Every scrape opens a connection, as after a server's keep-alive
	// timeout: each needs a file descriptor of its own.
	vllm := httptest.NewUnstartedServer(&vllmsim.Driven{Rate: 100, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	vllm.Config.SetKeepAlivesEnabled(false)
	vllm.Start()
	defer vllm.Close()
	_, port, _ := net.SplitHostPort(vllm.Listener.Addr().String())
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), roleEnv+"=flood", "TPSMON_TEST_PORT="+port)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var dlog daemonLog
	go dlog.read(stderr)
	out := started(t, cmd)
	addr, ok := strings.CutPrefix(line(t, out), "listening ")
	if !ok {
		t.Fatalf("the daemon did not say where it listens; log: %v", dlog.msgs(""))
	}
	states := make(chan string, 64)
	go func() {
		defer close(states)
		for out.Scan() {
			if l := out.Text(); strings.HasPrefix(l, "tpsmon_server,") {
				if m := stateRe.FindStringSubmatch(l); m != nil {
					states <- m[1]
				}
			}
		}
	}()
	nextState := func() string {
		select {
		case s, ok := <-states:
			if !ok {
				t.Fatal("the daemon ended")
			}
			return s
		case <-time.After(10 * time.Second):
			t.Fatal("no window for 10 s")
		}
		return ""
	}
	for i := 0; nextState() == "down"; i++ {
		if i > 10 {
			t.Fatal("no scrape succeeded before the flood")
		}
	}
	pid := cmd.Process.Pid
	base := openFiles(t, pid)

	// The flood, in waves; each connection is read until the daemon
	// closes it, or the end of the test's patience: counted from its own
	// dial, not the flood's start, since a loaded machine dials a wave
	// of 100 in far more than the 250 ms between waves.
	var wg sync.WaitGroup
	closed := make(chan time.Duration, floodWaves*floodWave) // how long each was held, from its dial
	held := 0                                                // not closed by the daemon
	var heldMu sync.Mutex
	const patience = 2*floodIdle + 2*time.Second
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	flood := func(wave int) {
		for i := range floodWave {
			at := time.Now()
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				t.Errorf("wave %d: dial %d: %v", wave, i, err)
				return
			}
			conns = append(conns, c)
			if i%2 == 0 {
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: tpsmon\r\n\r\n")
			}
			c.SetReadDeadline(at.Add(patience))
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := io.Copy(io.Discard, c)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					heldMu.Lock()
					held++
					heldMu.Unlock()
					return
				}
				closed <- time.Since(at)
			}()
		}
	}
	// Drain the windows closed before the flood.
	for len(states) > 0 {
		<-states
	}
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	peak, probes, failed := 0, 0, []string{}
	start := time.Now()
	for wave := range floodWaves {
		flood(wave)
		for end := start.Add(time.Duration(wave+1) * floodEvery); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
			peak = max(peak, openFiles(t, pid))
		}
		probes++
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failed = append(failed, resp.Status)
		}
	}
	flooded := time.Since(start)
	var during []string
	for len(states) > 0 {
		during = append(during, <-states)
	}
	during = append(during, nextState()) // the window the flood ended in
	wg.Wait()
	close(closed)
	var longest time.Duration
	n, early := 0, 0
	for d := range closed {
		longest = max(longest, d)
		n++
		if d < floodIdle {
			// Closed before any of its timeouts could end it (they start
			// at the accept, after the dial): shed at the cap.
			early++
		}
	}
	after := openFiles(t, pid)
	t.Logf("open files: %d before the flood, %d at most during it, %d after; %d connections closed by the daemon "+
		"(%d within %v of their dial), the longest held %v, %d held past %v; /healthz failed %d of %d; the flood took %v; windows %v",
		base, peak, after, n, early, floodIdle, longest.Round(time.Millisecond), held, patience, len(failed), probes,
		flooded.Round(time.Millisecond), during)

	if peak > base+floodCap+6 { // and a scrape, a probe, one accepted to be closed
		t.Errorf("%d files open during the flood, %d before: the cap of %d connections did not hold", peak, base, floodCap)
	}
	if len(failed) > 0 {
		t.Errorf("/healthz failed %d of %d times during the flood: %v", len(failed), probes, failed)
	}
	if len(during) < 2 {
		t.Errorf("%d windows closed during the flood", len(during))
	}
	for i, s := range during {
		if s == "down" {
			t.Errorf("window %d of the flood: the server reads as down (scrapes failed): %v", i, during)
			break
		}
	}
	if held > 0 {
		t.Errorf("%d of %d connections still open %v after their dial (idle and header timeouts %v)",
			held, floodWaves*floodWave, patience, floodIdle)
	}
	if after > base+4 {
		t.Errorf("%d files open after the flood, %d before", after, base)
	}
	if l := dlog.msgs("http.max_connections lowered"); len(l) != 1 || l[0]["max_connections"] != float64(floodCap) {
		t.Errorf("the cap lowered to the open-file limit is not logged once with max_connections=%d: %v", floodCap, l)
	}
	if l := dlog.msgs("http: connection cap reached"); len(l) != 1 {
		t.Errorf("%d log lines for the cap reached, want 1 (once a minute): %v", len(l), l)
	}
	// What the cap shed is counted, not only logged.
	resp, err := probe.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("/metrics after the flood: %v", err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	shed := 0.0
	for _, name := range []string{"tpsmon_http_idle_closed_total", "tpsmon_http_refused_total"} {
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(page)
		if m == nil {
			t.Errorf("/metrics has no %s", name)
			continue
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		shed += v
	}
	t.Logf("shed at the cap, on /metrics: %v", shed)
	// Every connection closed sooner than a timeout could close it was
	// shed; how many that is depends on how fast the machine let the
	// waves be dialed (each passes the cap by 68 when it comes within
	// the timeouts), so the count is checked against what was seen.
	if shed < float64(early) || shed > float64(floodWaves*floodWave) {
		t.Errorf("/metrics counts %v connections shed at the cap, want at least the %d closed within %v of their dial, at most the %d dialed",
			shed, early, floodIdle, floodWaves*floodWave)
	}
}

// openFiles counts the file descriptors process pid holds.
func openFiles(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// msgs returns the lines whose message starts with msg.
func (l *daemonLog) msgs(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, m := range l.lines {
		if s, _ := m["msg"].(string); strings.HasPrefix(s, msg) {
			out = append(out, m)
		}
	}
	return out
}
