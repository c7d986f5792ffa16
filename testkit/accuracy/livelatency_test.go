package accuracy

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/testkit/tokentruth"
)

// sweepObjective is the live sweep's time-per-token objective: between
// what one stream and eight streams see on one thread.
var sweepObjective = latency.Objective{TPOT: 6 * time.Millisecond}

// sweepLevel is one level of the live sweep: its streams run from half a
// scrape before start on.
type sweepLevel struct {
	streams    int
	start, end time.Time
}

// truthRequests are the sweep's requests as tokentruth holds them, each
// at the level that ran when it was sent; fromWrote starts each when it
// had been written whole (the TTFT a server can see).
func truthRequests(reqs []request, levels []sweepLevel, lead time.Duration, fromWrote bool) []tokentruth.Request {
	out := make([]tokentruth.Request, 0, len(reqs))
	for _, r := range reqs {
		start := r.start
		if fromWrote && !r.wrote.IsZero() {
			start = r.wrote
		}
		lvl := levels[0].streams
		for _, l := range levels {
			if !r.start.Before(l.start.Add(-lead)) {
				lvl = l.streams
			}
		}
		// In UTC, as replay's points and LoadRequests are: windows are
		// map keys.
		arr := make([]time.Time, len(r.arrivals))
		for i, a := range r.arrivals {
			arr[i] = a.UTC()
		}
		out = append(out, tokentruth.Request{Start: start.UTC(), End: r.end.UTC(), OK: true, Level: lvl, Arrivals: arr})
	}
	return out
}

// latencyPoints reads the latency fields of server's windows in [from, to)
// back from InfluxDB, as replay's points.
func latencyPoints(ctx context.Context, t *testing.T, c *report.Client, server string, from, to time.Time) []point {
	t.Helper()
	series, err := c.Query(ctx, fmt.Sprintf(`SELECT "ttft_p50_s", "ttft_p90_s", "itl_p50_s", "itl_p90_s", "slo_attainment", "latency_source", "ttft_basis" FROM "tpsmon_server" WHERE "server" = '%s' AND time >= %dms AND time < %dms`,
		server, from.UnixMilli(), to.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	var pts []point
	for _, s := range series {
		for _, r := range s.Rows() {
			tv, _ := influxql.Num(r["time"])
			p := point{Measurement: "tpsmon_server", Time: time.Unix(int64(tv), 0).UTC(), Fields: map[string]any{}}
			for k, v := range r {
				if k == "time" || v == nil {
					continue
				}
				if x, ok := influxql.Num(v); ok {
					p.Fields[k] = x
				} else {
					p.Fields[k] = v
				}
			}
			pts = append(pts, p)
		}
	}
	return pts
}

// checkSweepLatency holds the live sweep's latencies to the client's,
// window by window (the requests that ended in each, where tpsmon places
// a request's timing line), for the server read from its log (llm-l):
//
//   - ITL p50 and p90 within 10 % in each window (p90 where it has the 10
//     requests a p90 needs), attainment within 5 points there, as replay
//     holds its recordings (TestLatencyAgainstClients). Windows of 2 or
//     more requests are compared: a 5 s window holds 10-25 requests on an
//     idle machine, fewer when other jobs load it.
//   - TTFT from the HTTP handler's line (ttft_basis "http": -lv 4 with
//     --log-timestamps): never above the client's (send to first
//     arrival); p50 within 10 % of the client's counted from when its
//     request was written whole (connected, sent), as the mean of the
//     windows' errors at each level, not window by window, at the levels
//     where that is 20 ms or more (2 to 8 streams here): the median
//     window's, since a level of a live run under load holds a window or
//     two in which the client stalled for 10-20 ms, which no server sees
//     (replay's recordings are held by the mean). Before the write
//     no server sees anything (the client's connect and send: 1-3 ms on
//     this 2-core machine shared with other jobs, load 15-20), nor after
//     it the server's accept, read and hand-off to its HTTP thread before
//     the handler's line (1-5 ms more there): 10-20 % of one stream's
//     12-15 ms TTFT, which is tabled, not held. Both tables are logged.
//
// The server read from its metrics (llm-m) has no latency: llama.cpp's
// /metrics has no TTFT or ITL histogram (counters of prompt and decode
// seconds only), so its windows carry no latency field, which is held.
func checkSweepLatency(ctx context.Context, t *testing.T, c *report.Client, reqs []request, levels []sweepLevel, lead, w time.Duration, from, to time.Time) {
	t.Helper()
	truth := tokentruth.Windows(truthRequests(reqs, levels, lead, false), w, sweepObjective)
	seen := tokentruth.Windows(truthRequests(reqs, levels, lead, true), w, sweepObjective)
	for _, p := range latencyPoints(ctx, t, c, "llm-m", from, to) {
		if len(p.Fields) > 0 {
			t.Errorf("llm-m window %v: latency fields %v from a llama.cpp /metrics page, which has no latency histogram", p.Time, p.Fields)
		}
	}
	pts := latencyPoints(ctx, t, c, "llm-l", from, to)
	rep := compareLatency(pts, truth, 2)
	// A window in which the client stalled says nothing of tpsmon: its
	// requests' ends moved into later windows and its TTFT p90 is the
	// stall (seen once: 1653 ms against the server's 93, on a machine at
	// load 17, the client descheduled at the sweep's last window).
	// The curve's bound (clientStall): a stall of 250-500 ms at a
	// request's start shortens its client-side TPOT (its tokens then come
	// in a burst), enough to move it across the objective (a window read
	// attainment 0.077 by the client, 0 by the server, which logs its
	// tokens as it makes them).
	stalled := clientStalls(reqs, w, clientStall)
	for at := range stalled {
		t.Logf("window %v: the client received no token for over %v while its requests were open (the machine stalled it): this window and the next not compared", at, clientStall)
	}
	for _, r := range rep.rows {
		if r.cTTFT90 > 3*r.ttft90 && r.cTTFT90-r.ttft90 > 0.1 {
			stalled[r.start] = true
			t.Logf("window %v (level %d): the client stalled (TTFT p90 %.0f ms, the server's %.0f ms): not compared", r.start, r.level, 1e3*r.cTTFT90, 1e3*r.ttft90)
		}
	}
	unstalled := func(rep latencyReport) latencyReport {
		var out latencyReport
		for _, r := range rep.rows {
			if !stalled[r.start] {
				out.rows = append(out.rows, r)
			}
		}
		return out
	}
	t.Logf("llm-l latency against the client (TTFT from ttft_basis %q):\n%s", rep.basis(), rep)
	// The windows tpsmon wrote are counted before the stalled ones are
	// left out: how often CI's machine stalls the client is not tpsmon's.
	perLevel := map[int]int{}
	for _, r := range rep.rows {
		perLevel[r.level]++
	}
	fromWrote := unstalled(compareLatency(pts, seen, 2))
	rep = unstalled(rep)
	t.Logf("llm-l TTFT against the client's from its request written (%d windows compared, the stalled left out):\n%s", len(rep.rows), fromWrote)
	p90s := 0
	for _, r := range rep.rows {
		if r.ttftBasis != "http" {
			t.Errorf("window %v (level %d): ttft_basis %q, want http (the server logs at -lv 4 with its stamps)", r.start, r.level, r.ttftBasis)
		}
		if !(math.Abs(r.itl50/r.cITL50-1) <= 0.10) {
			t.Errorf("window %v (level %d): ITL p50 %.3f ms, client %.3f ms: more than 10 %% off", r.start, r.level, 1e3*r.itl50, 1e3*r.cITL50)
		}
		if r.n < 10 {
			continue // one request is 10 points or more
		}
		p90s++
		// 5 points, or one request and those on the objective's border:
		// a request that ends within milliseconds of the window's edge
		// (its timing line, the client's last read) is on either side of
		// it, and one whose client-timed TPOT is within 5 % of the
		// objective met it or not by the client's own reads (CI at load
		// 5-8: attainment 1.000 against the client's 0.909 in a window of
		// 22 requests under a 6 ms objective, whose ITL p90 read 5.279 ms
		// against the client's 5.274).
		if tol := max(0.05, float64(1+r.border)/float64(r.n)+1e-9); !(math.Abs(r.att-r.cAtt) <= tol) {
			t.Errorf("window %v (level %d): attainment %.3f, client %.3f: more than %.1f points off (%d of %d requests on the border)", r.start, r.level, r.att, r.cAtt, 100*tol, r.border, r.n)
		}
	}
	for _, l := range []int{1, 4, 8} {
		if perLevel[l] < 4 {
			t.Errorf("level %d: %d windows of 2 requests or more, want at least 4", l, perLevel[l])
		}
	}
	if n := len(rep.rows); n < 20 {
		t.Errorf("%d windows of 2 requests or more, want at least 20", n)
	}
	t.Logf("%d of %d windows had the 10 requests a p90 needs (fewer on a machine loaded by other jobs, whose requests take longer)", p90s, len(rep.rows))
	// ITL p90 is held per level, by the mean of its windows' errors (as
	// replay holds it): the p90 of a window's 10-25 requests is its
	// second-slowest or so, and one request that ends with the sweep (the
	// last window) or on a window's edge moves it by more than 10 %
	// (seen once: 27.1 ms against 30.5 in the last window, 2.3 % at its
	// level).
	for _, m := range rep.levels() {
		if m.n > 0 && !(m.itl90 <= 0.10) {
			t.Errorf("level %d: ITL p90 %.1f %% off the client's, mean over %d windows", m.level, 100*m.itl90, m.n)
		}
	}
	// p50 only: a server that is descheduled between its last token and
	// its timing line dates its first token late, by as much as the
	// machine stalls it, and that reaches the p90 of a window's 30
	// requests first (CI: 73.9 ms against the client's 64.5).
	ttftNotAbove(t, rep, false)
	// One level at least: the sweep's requests are long (sweepStream),
	// so fewer start at once and wait less; only 8 streams wait 20 ms or
	// more every time (CI: 26.8-29.3 ms), 6 streams 19.8-24.5 ms. Under
	// 20 ms the couple of milliseconds between the client's write and the
	// server's handler line are over a tenth of it (CI: 11.8 % at 17.9 ms).
	ttftWithin(t, fromWrote, 0.020, 1, true)
	for _, m := range fromWrote.levels() {
		if (m.level == 1 || m.level == 4 || m.level == 8) && m.n50 == 0 {
			t.Errorf("level %d: no TTFT to compare", m.level)
		}
	}
}

// recordSweep writes the sweep as a recording replay can read, when
// TPSMON_RECORD_SWEEP names a directory: the server's log (without the
// prompt cache's listing, a line per cached prompt at each request) and
// the client's requests (tokentruth.LoadRequests), gzipped, and when the
// server started (its log's stamps count from it).
func recordSweep(t *testing.T, logFile string, started time.Time, reqs []tokentruth.Request) {
	recordLive(t, "TPSMON_RECORD_SWEEP", logFile, started, reqs)
}

// recordLive writes a live run as recordSweep does, when env names a
// directory.
func recordLive(t *testing.T, env, logFile string, started time.Time, reqs []tokentruth.Request) {
	dir := os.Getenv(env)
	if dir == "" {
		return
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	var keep bytes.Buffer
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, " srv        update: ") || strings.Contains(line, " srv          load: ") ||
			strings.Contains(line, " srv   prompt_save: ") || strings.Contains(line, " srv         alloc: ") {
			continue
		}
		keep.WriteString(line)
	}
	var rq strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&rq, "%d %d 1 %d", r.Start.UnixMicro(), r.End.UnixMicro(), r.Level)
		for i, a := range r.Arrivals {
			if i == 0 {
				fmt.Fprintf(&rq, " %d", a.UnixMicro())
			} else {
				fmt.Fprintf(&rq, " %d", a.UnixMicro()-r.Arrivals[i-1].UnixMicro())
			}
		}
		rq.WriteString("\n")
	}
	for name, data := range map[string][]byte{"server.log.gz": keep.Bytes(), "requests.txt.gz": []byte(rq.String())} {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		zw.Write(data)
		zw.Close()
		if err := os.WriteFile(filepath.Join(dir, name), z.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "started-at.txt"), []byte(started.UTC().Format(time.RFC3339Nano)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded the run in %s", dir)
}

// clientStalls returns the windows (of length w, in UTC) in which the
// client received no token for longer than gap while one of its requests
// was open, and each such window's next: the server went on making tokens
// (seen in CI: a 5 s window in which the client read none while the server
// wrote 90 tok/s), so the client's times in and just after it are its own
// stall's, not the server's. Its streams' gaps between tokens are 2-20 ms
// and a first token waits at most a few hundred.
func clientStalls(reqs []request, w, gap time.Duration) map[time.Time]bool {
	var ts []time.Time
	for _, r := range reqs {
		ts = append(ts, r.start)
		ts = append(ts, r.arrivals...)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	out := map[time.Time]bool{}
	for i := 1; i < len(ts); i++ {
		a, b := ts[i-1], ts[i]
		if b.Sub(a) <= gap {
			continue
		}
		open := false
		for _, r := range reqs {
			if !r.start.After(a) && !r.end.Before(b) {
				open = true
				break
			}
		}
		if !open {
			continue
		}
		for at := a.UTC().Truncate(w); !at.After(b.UTC().Truncate(w).Add(w)); at = at.Add(w) {
			out[at] = true
		}
	}
	return out
}
