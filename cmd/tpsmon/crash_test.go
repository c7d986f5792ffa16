package main

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// proc is a tpsmon process of the test.
type proc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
}

func startDaemon(t *testing.T, cfgPath string) *proc {
	t.Helper()
	d := &proc{cmd: tpsmonCmd(t, "run", "--config", cfgPath)}
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return d
}

// closedUntil waits until the daemon's window marker in state says it
// closed a window ending after after, and returns that end.
func closedUntil(t *testing.T, d *proc, state string, after time.Time) time.Time {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := statefile.ReadRecord(filepath.Join(state, "last-window"))
		if err != nil {
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("window marker %q: %v", b, err)
		}
		if end := time.UnixMilli(ms); end.After(after) {
			return end
		}
	}
	d.cmd.Process.Kill()
	d.cmd.Wait()
	t.Fatalf("no window closed after %s:\n%s", after.Format(time.RFC3339Nano), d.stderr.String())
	return time.Time{}
}

// firstWindowOf is the start of the first window the process logged.
func firstWindowOf(t *testing.T, d *proc) time.Time {
	t.Helper()
	m := regexp.MustCompile(`first window" start=(\S+)`).FindStringSubmatch(d.stderr.String())
	if m == nil {
		t.Fatalf("the process did not log its first window:\n%s", d.stderr.String())
	}
	w, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("first window %q: %v", m[1], err)
	}
	return w
}

func TestKilledAndRestartedLosesNothingSpooled(t *testing.T) {
	t.Parallel()
	srv := influxtest.Start(t)
	db := influxtest.CreateDB(t, srv.URL, "crash")
	src := &vllmsim.Driven{Rate: 100, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)}
	vllm := httptest.NewServer(src)
	defer vllm.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tpsmon.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`host: crash-node
window: 1s
grace: 200ms
gpu: {backend: sim, interval: 200ms}
servers:
  - name: llm
    engine: vllm
    metrics_url: %s
    scrape_interval: 100ms
sink:
  influx: {url: %s, bucket: %s}
  spool: {dir: %s}
http: {listen: "127.0.0.1:0"}
`, vllm.URL, srv.URL, db, filepath.Join(dir, "state"))), 0o600)

	// The first process writes while InfluxDB is down, so everything it
	// closes is in its spool when it is killed.
	srv.Stop()
	state := filepath.Join(dir, "state")
	first := startDaemon(t, cfgPath)
	// Killed once it closed two windows: the end of the newest one it
	// spooled (its window marker) moved by a window.
	firstEnd := closedUntil(t, first, state, time.Time{})
	lastEnd := closedUntil(t, first, state, firstEnd)
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.cmd.Wait()
	killed := time.Now()
	// Restart in a later window, with InfluxDB back.
	time.Sleep(time.Until(killed.Truncate(time.Second).Add(1300 * time.Millisecond)))
	srv.Resume()
	second := startDaemon(t, cfgPath)
	// Stopped once it closed a window of its own.
	closedUntil(t, second, state, lastEnd)
	second.cmd.Process.Signal(syscall.SIGTERM)
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second process: %v\n%s", err, second.stderr.String())
	}

	// The restarted process says which windows nobody observed: from the
	// end of the last window the killed process closed to the window the
	// new one started in.
	log := second.stderr.String()
	m := regexp.MustCompile(`windows not observed.* from=(\S+) to=(\S+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("restart did not report unobserved windows:\n%s", log)
	}
	from, _ := time.Parse(time.RFC3339, m[1])
	to, _ := time.Parse(time.RFC3339, m[2])
	// The gap ends where the restarted process began observing: its first
	// window, which a loaded machine may push past the window after the kill.
	restarted := firstWindowOf(t, second)
	if from.After(killed) || to.After(restarted) || to.Before(killed.Truncate(time.Second).Add(time.Second)) {
		t.Errorf("reported gap %s..%s, kill at %s, restarted in the window of %s", m[1], m[2],
			killed.Format(time.RFC3339Nano), restarted.Format(time.RFC3339))
	}
	got, rows := influxtest.WindowStarts(t, srv.URL, db, "llm")
	firstWindow := firstWindowOf(t, first)
	spooled := 0
	for w := firstWindow.Unix(); w < from.Unix(); w++ {
		spooled++
		if !got[w] {
			t.Errorf("window %s, closed and spooled before the kill, is missing", time.Unix(w, 0).Format("15:04:05"))
		}
	}
	if spooled < 2 {
		t.Fatalf("only %d windows closed before the kill", spooled)
	}
	for w := from.Unix(); w < to.Unix(); w++ {
		if got[w] {
			t.Errorf("window %d was reported unobserved but written", w)
		}
	}
	if !got[restarted.Unix()] {
		t.Errorf("the restarted process wrote no window at %s", restarted.Format(time.RFC3339))
	}
	if rows != len(got) {
		t.Errorf("%d rows for %d windows", rows, len(got))
	}
	if !strings.Contains(log, "spool: resuming") {
		t.Errorf("restart did not resume the spool:\n%s", log)
	}
}
