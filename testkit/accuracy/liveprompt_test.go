package accuracy

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/testkit/tokentruth"
)

// longPrompt is a prompt of about 400 tokens, as a chat's system prompt
// and history make: stream and i make each one its own (the server is
// told not to reuse its cache, and a shared head would not be reused
// either).
func longPrompt(stream, i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "User %d, conversation %d. ", stream, i)
	for k := range 12 {
		fmt.Fprintf(&b, "Note %d: the monitor reads the tokens each server makes, the time each user waits for the first of them, and how long every later one takes; ", k)
	}
	b.WriteString("Now tell me a story about it.")
	return b.String()
}

// TestLiveLongPromptTTFT holds time to first token where it is what users
// wait for. The sweep's 8-token prompts (TestLiveSweepCurve) make a 7-20
// ms TTFT, of which the 1-3 ms no server line can see (the client's
// connect and send, the server's accept and read before its handler's
// line) is 10-20 %; with prompts of about 400 tokens the prefill is most
// of it. The same server as the sweep's: -lv 4 with its stamps (ttft_basis
// http), one thread, 8 slots; 1, 4 and 8 streams for 7 windows each, short
// outputs (8-32 tokens) so that a window holds the 10 requests a p90
// needs even on a machine loaded by other tests. Held against the client (send to first arrival) at each level
// by the median window (a window the loaded machine stalled the client
// in says nothing of tpsmon, and the sweep's stall rule, no token for
// 250 ms, would take every prefill of these prompts for one): TTFT p50
// and p90 and ITL p50 within 10 %, over 20 windows at least. About 2
// minutes.
func TestLiveLongPromptTTFT(t *testing.T) {
	dir := llamaServerDir(t)
	logFile := filepath.Join(t.TempDir(), "server.log")
	started := time.Now()
	llama := startLlamaServerSlots(t, dir, logFile, 8, 1, "--log-timestamps", "-lv", "4")
	influx := influxtest.URL(t)
	db := influxtest.CreateDB(t, influx, "liveprompt")
	const window, lead = 5 * time.Second, 500 * time.Millisecond
	const perLevel = 7
	_, stop := startTpsmon(t, fmt.Sprintf(`host: it
window: %v
grace: 1s
gpu: {backend: none}
discovery: {enabled: false}
http: {listen: "127.0.0.1:0"}
log: {level: info}
servers:
  - name: llm-l
    engine: auto
    log: {file: %s}
    slo: {tpot: %v}
sink:
  influx: {url: "%s", bucket: "%s"}
  spool: {dir: "%s"}
`, window, logFile, sweepObjective.TPOT, influx, db, filepath.Join(t.TempDir(), "spool")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	time.Sleep(4 * time.Second) // the log's reader up, the engine named
	var done []sweepLevel
	first := time.Now().Truncate(window).Add(window)
	for i, n := range []int{1, 4, 8} {
		start := first.Add(time.Duration(i*perLevel) * window)
		done = append(done, sweepLevel{n, start, start.Add(perLevel * window)})
	}
	last := done[len(done)-1].end
	reqs, err := runLevels(done, lead, func(s int) ([]request, error) {
		return streamCompletions(ctx, llama, s, last, []int{8, 16, 24, 32}, func(i int) string { return longPrompt(s, i) })
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(window + 4*time.Second) // the last window closed and written
	stop()
	truthReqs := truthRequests(reqs, done, lead, false)
	recordLive(t, "TPSMON_RECORD_LONG_PROMPTS", logFile, started, truthReqs)

	c := report.NewClient(influx, db, "", 30*time.Second)
	pts := latencyPoints(ctx, t, c, "llm-l", done[0].start, last)
	rep := compareLatency(pts, tokentruth.Windows(truthReqs, window, sweepObjective), 2)
	t.Logf("llm-l latency against the client, %d windows (TTFT from ttft_basis %q):\n%s", len(rep.rows), rep.basis(), rep)
	for _, r := range rep.rows {
		if r.ttftBasis != "http" {
			t.Errorf("window %v (level %d): ttft_basis %q, want http", r.start, r.level, r.ttftBasis)
		}
	}
	held := map[int]bool{}
	for _, m := range rep.levels() {
		if m.n50 < 4 || m.n < 4 {
			t.Errorf("level %d: %d windows with TTFT p50s and %d with p90s, want at least 4 of each", m.level, m.n50, m.n)
			continue
		}
		held[m.level] = true
		itl := medianITLError(rep, m.level)
		t.Logf("level %d: client TTFT p50 %.1f ms; median window off by %.1f %% (TTFT p50), %.1f %% (TTFT p90), %.1f %% (ITL p50); means %.1f, %.1f and %.1f %%",
			m.level, 1e3*m.cTTFT50, 100*m.med50, 100*m.med90, 100*itl, 100*m.ttft50, 100*m.ttft90, 100*m.itl50)
		if !(m.med50 <= 0.10) || !(m.med90 <= 0.10) || !(itl <= 0.10) {
			t.Errorf("level %d: the median window off by %.1f %% (TTFT p50), %.1f %% (TTFT p90), %.1f %% (ITL p50): want at most 10 %%", m.level, 100*m.med50, 100*m.med90, 100*itl)
		}
	}
	for _, l := range []int{1, 4, 8} {
		if !held[l] {
			t.Errorf("level %d: no TTFT held", l)
		}
	}
	if len(rep.rows) < 20 {
		t.Errorf("%d windows compared, want at least 20", len(rep.rows))
	}
}

// medianITLError is the median over a level's windows of the ITL p50's
// error against the client's.
func medianITLError(rep latencyReport, level int) float64 {
	var errs []float64
	for _, r := range rep.rows {
		if r.level == level && !math.IsNaN(r.itl50+r.cITL50) {
			errs = append(errs, math.Abs(r.itl50/r.cITL50-1))
		}
	}
	return tokentruth.Quantile(errs, 0.5).Value
}
