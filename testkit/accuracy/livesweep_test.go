package accuracy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// request is one completion as the client saw it.
type request struct {
	stream     int
	start, end time.Time
	// wrote is when the request was sent whole (connected, headers and
	// body written): what came before it no server sees.
	wrote    time.Time
	arrivals []time.Time
}

// sweepStream streams completions back to back until end, as one user.
//
// Its requests are long (0.3-5 s) because between two of a stream's
// requests the server counts one slot fewer: from the last token through
// the client's next request to its slot, time that grows on a starved
// machine. With requests of 64-192 tokens (0.8 s at 6 streams) CI's
// machine lost 8 % of them there (TTFT p50 64-81 ms against 27 quiet): the
// server's own concurrency at 6 streams read 5.4-5.6, by its log as by its
// gauge, and two of the level's five windows fell into bin 5 on both.
func sweepStream(ctx context.Context, base string, stream int, end time.Time) ([]request, error) {
	return streamCompletions(ctx, base, stream, end, []int{192, 288, 384, 576}, func(int) string { return "Tell me a story about a monitor of tokens" })
}

// streamCompletions streams completions back to back until end, as one
// user: the i-th of the sizes' output lengths in turn, prompt(i) each.
func streamCompletions(ctx context.Context, base string, stream int, end time.Time, sizes []int, prompt func(i int) string) ([]request, error) {
	var out []request
	for i := 0; time.Now().Before(end); i++ {
		body, _ := json.Marshal(map[string]any{"prompt": prompt(i), "n_predict": sizes[(i+stream)%len(sizes)],
			"stream": true, "ignore_eos": true, "temperature": 1.0, "cache_prompt": false})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/completion", bytes.NewReader(body))
		if err != nil {
			return out, err
		}
		req.Header.Set("Content-Type", "application/json")
		r := request{stream: stream, start: time.Now()}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { r.wrote = time.Now() }}))
		resp, err := streamClient.Do(req)
		if err != nil {
			return out, err
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Stop bool `json:"stop"`
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				resp.Body.Close()
				return out, err
			}
			if ev.Stop {
				break
			}
			r.arrivals = append(r.arrivals, time.Now())
		}
		resp.Body.Close()
		r.end = time.Now()
		out = append(out, r)
	}
	return out, nil
}

// runLevels climbs the levels: lead before each level's start it starts
// the streams that level adds, each running stream(s) until it returns,
// and it gives every stream's requests once all have ended (the first
// error, if one failed).
func runLevels(levels []sweepLevel, lead time.Duration, stream func(s int) ([]request, error)) ([]request, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed error
	var reqs []request
	prev := 0
	for _, l := range levels {
		time.Sleep(time.Until(l.start.Add(-lead)))
		for s := prev; s < l.streams; s++ {
			wg.Go(func() {
				got, err := stream(s)
				mu.Lock()
				defer mu.Unlock()
				reqs = append(reqs, got...)
				if err != nil && failed == nil {
					failed = err
				}
			})
		}
		prev = l.streams
	}
	wg.Wait()
	return reqs, failed
}

func overlap(a0, a1, b0, b1 time.Time) float64 {
	lo, hi := a0, a1
	if b0.After(lo) {
		lo = b0
	}
	if b1.Before(hi) {
		hi = b1
	}
	return math.Max(0, hi.Sub(lo).Seconds())
}

// decoding is a request's decode: from its first token's arrival to its
// last's, and the tokens after the first. Per-user TPS is a stream's decode
// speed (docs/design.md), which the server's own counters (generation
// seconds, the timing line's eval time) measure: the time to the first
// token, queue and prompt, is not in it.
func (r request) decoding(t0, t1 time.Time) (secs, tokens float64) {
	if len(r.arrivals) < 2 {
		return 0, 0
	}
	for _, a := range r.arrivals[1:] {
		if !a.Before(t0) && a.Before(t1) {
			tokens++
		}
	}
	return overlap(r.arrivals[0], r.arrivals[len(r.arrivals)-1], t0, t1), tokens
}

// clientWindows are the client's own windows of length w from start to
// end: tokens arrived / w, mean requests in flight, and per-user TPS as
// the mean over streams decoding for a tenth of the window or more of
// their decode tokens over their decode time.
func clientWindows(reqs []request, start, end time.Time, w time.Duration) []curve.Window {
	var out []curve.Window
	for t := start; t.Before(end); t = t.Add(w) {
		t1 := t.Add(w)
		var tokens, busy float64
		decoding, got := map[int]float64{}, map[int]float64{}
		for _, r := range reqs {
			busy += overlap(r.start, r.end, t, t1)
			for _, a := range r.arrivals {
				if !a.Before(t) && a.Before(t1) {
					tokens++
				}
			}
			secs, n := r.decoding(t, t1)
			decoding[r.stream] += secs
			got[r.stream] += n
		}
		cw := curve.Window{Key: curve.Key{Server: "client"}, Seconds: w.Seconds(), Running: curve.Some(busy / w.Seconds()),
			SystemTPS: curve.Some(tokens / w.Seconds())}
		var sum float64
		n := 0
		for s, sec := range decoding {
			if sec >= w.Seconds()/10 {
				sum += got[s] / sec
				n++
			}
		}
		if n > 0 {
			cw.PerUserTPS = curve.Some(sum / float64(n))
		}
		out = append(out, cw)
	}
	return out
}

// levelWindows lists the client's windows of a level (system and
// per-user TPS), the first marked: what its bin holds.
func levelWindows(cws []curve.Window, from time.Time, w time.Duration, levels []sweepLevel, n int) string {
	var out []string
	for _, l := range levels {
		if l.streams != n {
			continue
		}
		for i, cw := range cws {
			ts := from.Add(time.Duration(i) * w)
			if ts.Before(l.start) || !ts.Before(l.end) {
				continue
			}
			mark := ""
			if ts.Equal(l.start) {
				mark = " (first)"
			}
			out = append(out, fmt.Sprintf("%.1f/%.1f%s", cw.SystemTPS.V, cw.PerUserTPS.V, mark))
		}
	}
	return "system/per-user tok/s " + strings.Join(out, ", ")
}

// clientStall is how long the client may read no token to any of its
// streams while a request is open before the live sweep takes the machine
// to have stalled it: its streams' gaps between tokens are 2-20 ms and a
// first token waits at most a few hundred (TTFT p90 at 8 streams).
const clientStall = 250 * time.Millisecond

// TestLiveSweepCurve runs a real llama-server (8 slots) through 1, 2, 4,
// 6 and 8 concurrent streams, tpsmon run writing its windows to a real
// InfluxDB, and builds the report's operating curve from there: at every
// level the bin's median system and per-user TPS within 7 % of the
// client's own windows (the same 5 s windows, binned by the same rule),
// the bin's means (system per observed second, per-user per
// stream-second) tabled beside the client's; for floors
// between levels the operating point of the client's per-level table, its
// headroom within 7 % of the client's windows'.
//
// The sweep climbs: each level adds streams just before a window's edge
// and none stops before the end, so no level change or drain puts a
// window in another level's bin (the bins were 8-107 % off when each
// level drained into an idle gap: fractional windows, binned apart by a
// sampled gauge and by the client, in bins whose windows varied 10x).
// The server runs one thread: with two on a shared 2-core machine its
// rate swung 4-450 tokens/s within a level (a thread waiting at each
// op's barrier for one descheduled), with one within about 2x at load
// 9-12. About 3 minutes.
func TestLiveSweepCurve(t *testing.T) {
	dir := llamaServerDir(t)
	logFile := filepath.Join(t.TempDir(), "server.log")
	// -lv 4 and its stamps: the log times each request from its HTTP
	// handler's line to its first token (ttft_basis http).
	started := time.Now()
	llama := startLlamaServerSlots(t, dir, logFile, 8, 1, "--log-timestamps", "-lv", "4")
	influx := influxtest.URL(t)
	db := influxtest.CreateDB(t, influx, "livesweep")
	const window, scrape = 5 * time.Second, time.Second
	const perLevel = 6 // windows per level
	_, stop := startTpsmon(t, fmt.Sprintf(`host: it
window: %v
grace: 1s
gpu: {backend: none}
discovery: {enabled: false}
http: {listen: "127.0.0.1:0"}
log: {level: info}
servers:
  - name: llm-m
    engine: auto
    metrics_url: %s/metrics
    scrape_interval: %v
  - name: llm-l
    engine: auto
    log: {file: %s}
    slo: {tpot: %v}
sink:
  influx: {url: "%s", bucket: "%s"}
  spool: {dir: "%s"}
`, window, llama, scrape, logFile, sweepObjective.TPOT, influx, db, filepath.Join(t.TempDir(), "spool")))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	time.Sleep(4 * scrape) // sources up, engines named
	levels := []int{1, 2, 4, 6, 8}
	var done []sweepLevel
	first := time.Now().Truncate(window).Add(window) // on a window's edge
	for i, n := range levels {
		start := first.Add(time.Duration(i*perLevel) * window)
		done = append(done, sweepLevel{n, start, start.Add(perLevel * window)})
	}
	last := done[len(done)-1].end
	// A level's new streams start half a scrape before its edge: in its
	// first window every stream is in flight, and the window before sees
	// them in at most one gauge sample (+0.4 running at most, not enough
	// to move it a bin).
	reqs, err := runLevels(done, scrape/2, func(s int) ([]request, error) { return sweepStream(ctx, llama, s, last) })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(window + 4*scrape) // the last window closed and written
	stop()
	// The report's range is the sweep's: the streams' drain after the last
	// level (fewer running, at the top level's rates) would otherwise be a
	// window in a lower level's bin.
	from, to := done[0].start, last

	// The client's per-level table: each level's tokens from its second
	// window to the next level's streams starting, per-user the mean over
	// its streams of their decode tokens over their decode time.
	type row struct{ sys, user float64 }
	table := map[int]row{}
	for _, l := range done {
		s0, s1 := l.start.Add(window), l.end.Add(-scrape/2)
		var tokens float64
		decoding, got := map[int]float64{}, map[int]float64{}
		for _, r := range reqs {
			for _, a := range r.arrivals {
				if !a.Before(s0) && a.Before(s1) {
					tokens++
				}
			}
			if r.stream < l.streams {
				secs, n := r.decoding(s0, s1)
				decoding[r.stream] += secs
				got[r.stream] += n
			}
		}
		var sum float64
		for s, sec := range decoding {
			sum += got[s] / sec
		}
		table[l.streams] = row{tokens / s1.Sub(s0).Seconds(), sum / float64(len(decoding))}
	}
	// Windows in or just after one where the machine stalled the client
	// (no token to any stream for clientStall) are left out of both sides'
	// curves: the server went on making tokens the client read late, in
	// the next window, and held back its streams' next requests, so the
	// two sides' windows no longer hold the same tokens or the same
	// streams (CI: bin 8 read 9.5 % and 13.1 % above the client's with
	// three of its six windows stalled, one server's windows binned at 7).
	stalled := clientStalls(reqs, window, clientStall)
	kept := func(at time.Time) bool { return !stalled[at.UTC()] }
	cb := curve.NewBuilder()
	for i, w := range clientWindows(reqs, from, to, window) {
		if kept(from.Add(time.Duration(i) * window)) {
			cb.Add(w)
		}
	}
	clientCurve := func(floor float64) curve.Curve { return cb.Curves(curve.Options{Floor: floor})[0] }
	for at := range stalled {
		if !at.Before(from) && at.Before(to) {
			t.Logf("window %v: the client read no token for over %v: left out of both curves", at, clientStall)
		}
	}

	c := report.NewClient(influx, db, "", 30*time.Second)
	recordSweep(t, logFile, started, truthRequests(reqs, done, scrape/2, false))
	checkSweepLatency(ctx, t, c, reqs, done, scrape/2, window, from, to)
	f, err := report.Plan(ctx, c, report.Filter{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	// tpsmon's windows as the report reads them, and its curve from the
	// unstalled ones; the report's own curve, from all of them, must be
	// the curve of all of them.
	text, err := f.Render(report.CurveWindows, "")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, text)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(cs []curve.Curve) map[string]curve.Curve {
		out := map[string]curve.Curve{}
		for _, cv := range cs {
			if cv.Kind == curve.Decode {
				out[cv.Server] = cv
			}
		}
		return out
	}
	tpsmonCurves := func(floor float64, keep func(time.Time) bool) map[string]curve.Curve {
		b := curve.NewBuilder()
		for _, s := range rows {
			for _, r := range s.Rows() {
				if ts, ok := influxql.Num(r["time"]); ok && keep(time.Unix(int64(ts), 0)) {
					b.Add(curve.WindowOf(s.Tags, r, influxql.Num, 0))
				}
			}
		}
		return decode(b.Curves(curve.Options{Floor: floor}))
	}
	all := func(time.Time) bool { return true }
	curves := func(floor float64) map[string]curve.Curve {
		cs, skipped, err := report.OperatingCurves(ctx, c, f, floor)
		if err != nil {
			t.Fatal(err)
		}
		if len(skipped) > 0 {
			t.Errorf("windows skipped: %v", skipped)
		}
		if got, want := decode(cs), tpsmonCurves(floor, all); !reflect.DeepEqual(got, want) {
			t.Errorf("floor %.0f: the report's curves %+v, its windows' %+v", floor, got, want)
		}
		return tpsmonCurves(floor, kept)
	}
	got := curves(20)
	cl := clientCurve(20)
	var tab strings.Builder
	defer func() { t.Log("\n" + tab.String()) }()
	// Window by window, both sides, for the log.
	series, err := c.Query(ctx, fmt.Sprintf(`SELECT "running", "system_tps", "per_user_tps" FROM "tpsmon_server" WHERE time >= %dms AND time < %dms GROUP BY "server"`, from.UnixMilli(), to.UnixMilli()))
	if err != nil {
		t.Fatal(err)
	}
	cws := clientWindows(reqs, from, to, window)
	fmt.Fprintf(&tab, "| window | client running | sys | per-user |")
	for _, s := range series {
		fmt.Fprintf(&tab, " %s running | sys | per-user |", s.Tags["server"])
	}
	fmt.Fprintln(&tab)
	for i, w := range cws {
		ts := from.Add(time.Duration(i) * window)
		mark := ""
		if !kept(ts) {
			mark = " (stalled)"
		}
		fmt.Fprintf(&tab, "| %s%s | %.2f | %.1f | %.1f |", ts.Format("15:04:05.0"), mark, w.Running.V, w.SystemTPS.V, w.PerUserTPS.V)
		for _, s := range series {
			cell := " - | - | - |"
			for _, r := range s.Rows() {
				if tv, _ := influxql.Num(r["time"]); int64(tv) == ts.Unix() {
					v := func(k string) float64 {
						if x, ok := influxql.Num(r[k]); ok {
							return x
						}
						return math.NaN()
					}
					cell = fmt.Sprintf(" %.2f | %.1f | %.1f |", v("running"), v("system_tps"), v("per_user_tps"))
				}
			}
			tab.WriteString(cell)
		}
		fmt.Fprintln(&tab)
	}
	var means strings.Builder
	fmt.Fprintf(&means, "\n| level | client table sys / per-user | server | client windows' bin mean sys / per-user | tpsmon mean sys / per-user | tpsmon median sys / per-user | mean vs table | mean vs client windows | median vs table |\n")
	var gaps []string
	defer func() { t.Log(means.String() + strings.Join(gaps, "\n")) }()
	fmt.Fprintf(&tab, "| level | client table sys | per-user | client windows sys p50 | per-user p50 | server | tpsmon windows | sys p50 | per-user p50 | vs windows sys / per-user | vs table sys / per-user |\n")
	// A level is compared where two of its windows or more are unstalled,
	// and four of the five levels must be.
	keptAt, compared := map[int]int{}, map[string]int{}
	for _, l := range done {
		for at := l.start; at.Before(l.end); at = at.Add(window) {
			if kept(at) {
				keptAt[l.streams]++
			}
		}
	}
	defer func() {
		for srv, n := range compared {
			if n < len(levels)-1 {
				t.Errorf("%s: %d of %d levels compared (the others stalled)", srv, n, len(levels))
			}
		}
	}()
	for _, srv := range []string{"llm-m", "llm-l"} {
		cv, ok := got[srv]
		if !ok {
			t.Fatalf("no decode curve for %s in %v", srv, got)
		}
		for _, n := range levels {
			label := fmt.Sprint(n)
			tb, cbn := bin(cv, label), bin(cl, label)
			if keptAt[n] < 2 {
				t.Logf("%s level %d: %d of its windows not stalled: not compared", srv, n, keptAt[n])
				continue
			}
			compared[srv]++
			if tb == nil || cbn == nil || tb.SystemTPS == nil || tb.PerUserTPS == nil || cbn.SystemTPS == nil || cbn.PerUserTPS == nil {
				t.Errorf("%s level %d: no bin (tpsmon %v, client %v)", srv, n, tb, cbn)
				continue
			}
			tr := table[n]
			ws, wu := off(tb.SystemTPS.P50, cbn.SystemTPS.P50), off(tb.PerUserTPS.P50, cbn.PerUserTPS.P50)
			fmt.Fprintf(&tab, "| %d | %.1f | %.1f | %.1f | %.1f | %s | %d | %.1f | %.1f | %+.1f %% / %+.1f %% | %+.1f %% / %+.1f %% |\n", n, tr.sys, tr.user,
				cbn.SystemTPS.P50, cbn.PerUserTPS.P50, srv, tb.Windows, tb.SystemTPS.P50, tb.PerUserTPS.P50, 100*ws, 100*wu,
				100*off(tb.SystemTPS.P50, tr.sys), 100*off(tb.PerUserTPS.P50, tr.user))
			if math.Abs(ws) > 0.07 || math.Abs(wu) > 0.07 {
				t.Errorf("%s level %d: %+.1f %% (system), %+.1f %% (per user) off the client's windows", srv, n, 100*ws, 100*wu)
			}
			if tb.SystemTPS.Mean == nil || tb.PerUserTPS.Mean == nil || cbn.SystemTPS.Mean == nil || cbn.PerUserTPS.Mean == nil {
				t.Errorf("%s level %d: no means (tpsmon %+v, client %+v)", srv, n, *tb, *cbn)
				continue
			}
			sm, um := *tb.SystemTPS.Mean, *tb.PerUserTPS.Mean
			ms, mu := off(sm, tr.sys), off(um, tr.user)
			fmt.Fprintf(&means, "| %d | %.1f / %.1f | %s | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %+.1f %% / %+.1f %% | %+.1f %% / %+.1f %% | %+.1f %% / %+.1f %% |\n", n, tr.sys, tr.user, srv,
				*cbn.SystemTPS.Mean, *cbn.PerUserTPS.Mean, sm, um, tb.SystemTPS.P50, tb.PerUserTPS.P50, 100*ms, 100*mu,
				100*off(sm, *cbn.SystemTPS.Mean), 100*off(um, *cbn.PerUserTPS.Mean), 100*off(tb.SystemTPS.P50, tr.sys), 100*off(tb.PerUserTPS.P50, tr.user))
			// The means are tabled, not held (the medians above are): a
			// mean moves with every window a bin gains or loses, and live a
			// window where the machine stalled the client (CI runs other
			// packages beside this one) reads 7 running to tpsmon, whose
			// requests the client's streams held back, and 8 to the client:
			// bin 8's means were then 15 % apart on windows each side read
			// within 1 %. The client's per-level table leaves out each
			// level's first window, which the bin holds. The replay
			// (TestSweepCurve), where the windows are fixed, holds the means.
			csm, cum := *cbn.SystemTPS.Mean, *cbn.PerUserTPS.Mean
			if gs, gu := off(csm, tr.sys), off(cum, tr.user); math.Abs(gs) > 0.07 || math.Abs(gu) > 0.07 {
				gaps = append(gaps, fmt.Sprintf("%s level %d: the client's own windows of bin %d are %+.1f %% / %+.1f %% off its table: %s", srv, n, n, 100*gs, 100*gu, levelWindows(cws, from, window, done, n)))
			}
			if cs, cu := off(sm, csm), off(um, cum); math.Abs(cs) > 0.07 || math.Abs(cu) > 0.07 {
				gaps = append(gaps, fmt.Sprintf("%s level %d: the bin's means %+.1f %% (system), %+.1f %% (per user) off the client's windows' (their bins hold different windows)", srv, n, 100*cs, 100*cu))
			}
		}
	}
	// Floors between levels whose per-user TPS (the client's table) differ
	// by more than a fifth, and one every level meets.
	byUser := append([]int{}, levels...)
	sort.Slice(byUser, func(i, j int) bool { return table[byUser[i]].user < table[byUser[j]].user })
	floors := []float64{20}
	for i := 1; i < len(byUser); i++ {
		lo, hi := table[byUser[i-1]].user, table[byUser[i]].user
		if hi > 1.2*lo {
			floors = append(floors, math.Sqrt(lo*hi))
		}
	}
	// The client's busy windows' median system TPS: the table's headroom
	// denominator, as the curve's is its windows'.
	var busy []float64
	for _, w := range cws {
		if w.Running.V >= 0.5 {
			busy = append(busy, w.SystemTPS.V)
		}
	}
	sort.Float64s(busy)
	med := busy[len(busy)/2]
	if len(busy)%2 == 0 {
		med = (busy[len(busy)/2-1] + busy[len(busy)/2]) / 2
	}
	fmt.Fprintf(&tab, "\n| floor | client table: level | headroom | client windows: bin | headroom | llm-m bin | headroom | llm-l bin | headroom |\n")
	for _, floor := range floors {
		want := 0
		for _, n := range levels {
			if table[n].user >= floor && n > want {
				want = n
			}
		}
		cop := clientCurve(floor).Operating
		th, ch := math.NaN(), math.NaN()
		if want > 0 {
			th = table[want].sys / med
		}
		if cop.Headroom != nil {
			ch = *cop.Headroom
		}
		line := fmt.Sprintf("| %.0f | %d | %.2f | %s | %.2f |", floor, want, th, cop.Running, ch)
		for _, srv := range []string{"llm-m", "llm-l"} {
			op := curves(floor)[srv].Operating
			h := math.NaN()
			if op.Headroom != nil {
				h = *op.Headroom
			}
			line += fmt.Sprintf(" %s | %.2f |", op.Running, h)
			// A bin of fewer windows than the curve's minimum is thin:
			// neither tpsmon's curve nor the client's windows' may take
			// it, so the table's level is not theirs to find.
			if want > 0 && keptAt[want] < curve.DefaultMinWindows {
				line += " (not compared: its level stalled)"
				continue
			}
			if want > 0 && (op.Running != fmt.Sprint(want) || cop.Running != fmt.Sprint(want)) {
				t.Errorf("floor %.0f: %s's operating point %q, the client's table %d (its windows %q)", floor, srv, op.Running, want, cop.Running)
			} else if want > 0 && !(math.Abs(off(h, ch)) <= 0.07) {
				t.Errorf("floor %.0f: %s's headroom %.3f, the client's windows %.3f (its table %.3f)", floor, srv, h, ch, th)
			}
		}
		fmt.Fprintln(&tab, line)
	}
}
