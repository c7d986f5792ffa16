package agent

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/testkit/syncbuf"
	"github.com/tpsmon/tpsmon/window"
)

// serverWindows are n windows of server llm from start, one per second.
func serverWindows(start time.Time, n int) []analysis.Closed {
	cs := make([]analysis.Closed, n)
	for i := range cs {
		at := start.Add(time.Duration(i) * time.Second)
		cs[i] = analysis.Closed{Start: at, Servers: []analysis.ServerWindow{{State: schema.StateOK,
			ServerWindow: window.ServerWindow{Start: at, Length: time.Second, Host: "h", Server: "llm", Engine: "vllm",
				Model: "m", Tokens: window.Some(int64(100 + i)), Source: schema.SourceMetrics, Coverage: 1}}}}
	}
	return cs
}

// waitFor polls cond until it holds, or fails the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s", what)
		}
	}
}

// TestRefusedPointsMakeNotReady is issue 28's poison: another client
// writes tokens as a string, after which the real InfluxDB refuses every
// tpsmon_server point (field type conflict). /readyz says so, naming the
// measurement, the server and InfluxDB's reason, and the log has one
// line for the episode, not one per batch; once the measurement is
// dropped the points are taken, and tpsmon is ready again.
func TestRefusedPointsMakeNotReady(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "poison")
	cfg := configtest.Private(t)
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db
	var logs syncbuf.Buffer
	out, stop, err := startInflux(cfg, slog.New(slog.NewTextHandler(&logs, nil)), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tel := &telemetry{health: &health{}, metrics: newMetrics(), spool: out.Spool, sender: out.Sender}

	start := time.Unix(1_700_000_000, 0)
	// Types are per shard: the poison lands in the one tpsmon writes to.
	influxtest.Write(t, base, db, fmt.Sprintf(`tpsmon_server,host=evil,server=x tokens="poison" %d`, start.UnixMilli()-1))
	const refused = 9
	for _, c := range serverWindows(start, refused) {
		out.WriteWindows([]analysis.Closed{c}) // one batch each
		waitFor(t, "the window was not dealt with", func() bool { return out.Spool.Stats().Points == 0 })
	}
	if q := out.Spool.Stats().Quarantined; q != refused {
		t.Fatalf("%d points quarantined, want %d", q, refused)
	}
	rep, code := tel.readiness()
	issues := strings.Join(rep.Issues, "\n")
	t.Logf("/readyz %d: %s", code, issues)
	if code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d %q while every point is refused: %v", code, rep.Status, rep.Issues)
	}
	for _, want := range []string{schema.Server, "llm", "9 points", "field type conflict"} {
		if !strings.Contains(issues, want) {
			t.Errorf("/readyz issues do not say %q: %q", want, issues)
		}
	}
	rec := httptest.NewRecorder()
	tel.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{"tpsmon_refused_points_total 9\n", "tpsmon_refused_series 1\n",
		"tpsmon_quarantined_points_total 9\n", "tpsmon_quarantine_dropped_points_total 0\n"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^tpsmon_quarantine_bytes [1-9]`).MatchString(rec.Body.String()) {
		t.Errorf("/metrics does not count the quarantine's bytes")
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d ERROR lines for one episode of %d refused batches:\n%s", n, refused, logs.String())
	}

	// The conflict is gone: the next points are taken, and tpsmon is ready.
	influxtest.Query(t, base, db, "DROP MEASUREMENT "+schema.Server)
	sent := out.Sender.Health().Sent
	out.WriteWindows(serverWindows(start.Add(time.Hour), 1))
	waitFor(t, "the point after the conflict was not sent", func() bool { return out.Sender.Health().Sent > sent })
	if rep, code := tel.readiness(); code != http.StatusOK {
		t.Errorf("/readyz %d after InfluxDB took points again: %v", code, rep.Issues)
	}
	if !strings.Contains(logs.String(), "refused_points=9") {
		t.Errorf("the episode's end is not logged with its count:\n%s", logs.String())
	}
}
