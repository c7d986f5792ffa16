package accuracy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
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
	arrivals   []time.Time
}

// sweepStream streams completions back to back until end, as one user.
func sweepStream(ctx context.Context, base string, stream int, end time.Time) ([]request, error) {
	sizes := []int{48, 64, 96, 128}
	var out []request
	for i := 0; time.Now().Before(end); i++ {
		body, _ := json.Marshal(map[string]any{"prompt": "Tell me a story about a monitor of tokens", "n_predict": sizes[(i+stream)%len(sizes)],
			"stream": true, "ignore_eos": true, "temperature": 1.0, "cache_prompt": false})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/completion", bytes.NewReader(body))
		if err != nil {
			return out, err
		}
		req.Header.Set("Content-Type", "application/json")
		r := request{stream: stream, start: time.Now()}
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

// clientWindows are the client's own windows of length w from start to
// end: tokens arrived / w, mean requests in flight, and per-user TPS as
// the mean over streams in flight for a tenth of the window or more of
// their arrivals over their time in flight (the sweep recording's rule).
func clientWindows(reqs []request, start, end time.Time, w time.Duration) []curve.Window {
	var out []curve.Window
	for t := start; t.Before(end); t = t.Add(w) {
		t1 := t.Add(w)
		var tokens, busy float64
		inflight, got := map[int]float64{}, map[int]float64{}
		for _, r := range reqs {
			o := overlap(r.start, r.end, t, t1)
			busy += o
			inflight[r.stream] += o
			for _, a := range r.arrivals {
				if !a.Before(t) && a.Before(t1) {
					tokens++
					got[r.stream]++
				}
			}
		}
		cw := curve.Window{Key: curve.Key{Server: "client"}, Seconds: w.Seconds(), Running: curve.Some(busy / w.Seconds()),
			SystemTPS: curve.Some(tokens / w.Seconds())}
		var sum float64
		n := 0
		for s, sec := range inflight {
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

// TestLiveSweepCurve runs a real llama-server (8 slots) through 1, 2, 4,
// 6 and 8 concurrent streams, tpsmon run writing its windows to a real
// InfluxDB, and builds the report's operating curve from there: at every
// level the bin's median system and per-user TPS within 7 % of the
// client's own windows binned by the same rule, and the operating point
// of the client's per-level table for floors between levels.
//
// It takes five minutes and a quiet machine (a CPU llama-server's speed
// is the machine's), so it runs when TPSMON_LIVE_SWEEP is set: on a
// shared 2-core machine at load 14 the server's own rate swung 4-400
// tokens/s within a level, and no curve holds there.
func TestLiveSweepCurve(t *testing.T) {
	if os.Getenv("TPSMON_LIVE_SWEEP") == "" {
		t.Skip("a five-minute sweep of a real llama-server: set TPSMON_LIVE_SWEEP=1 on a quiet machine")
	}
	dir := llamaServerDir(t)
	logFile := filepath.Join(t.TempDir(), "server.log")
	llama := startLlamaServerSlots(t, dir, logFile, 8, 2)
	influx := influxtest.URL(t)
	db := influxtest.CreateDB(t, influx, "livesweep")
	const window, scrape = 5 * time.Second, time.Second
	const perLevel = 6 // windows of load per level; one idle window after each
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
sink:
  influx: {url: "%s", bucket: "%s"}
  spool: {dir: "%s"}
`, window, llama, scrape, logFile, influx, db, filepath.Join(t.TempDir(), "spool")))
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	time.Sleep(4 * scrape) // sources up, engines named
	levels := []int{1, 2, 4, 6, 8}
	type level struct {
		streams    int
		start, end time.Time
	}
	var done []level
	var reqs []request
	for _, n := range levels {
		start := time.Now().Truncate(window).Add(window) // on a window's edge
		time.Sleep(time.Until(start))
		end := start.Add(perLevel * window)
		var mu sync.Mutex
		var wg sync.WaitGroup
		var failed error
		for s := range n {
			wg.Go(func() {
				got, err := sweepStream(ctx, llama, 100*n+s, end)
				mu.Lock()
				defer mu.Unlock()
				reqs = append(reqs, got...)
				if err != nil && failed == nil {
					failed = err
				}
			})
		}
		wg.Wait()
		if failed != nil {
			t.Fatal(failed)
		}
		done = append(done, level{n, start, end})
		time.Sleep(window) // idle: a window without load between levels
	}
	time.Sleep(4 * scrape)
	stop()
	from, to := done[0].start.Add(-window), done[len(done)-1].end.Add(2*window)

	// The client's per-level table: each level's tokens over its time after
	// the first window, per-user the mean over streams of their tokens over
	// their time in flight.
	type row struct{ sys, user float64 }
	table := map[int]row{}
	for _, l := range done {
		s0 := l.start.Add(window)
		var tokens float64
		inflight, got := map[int]float64{}, map[int]float64{}
		for _, r := range reqs {
			if r.stream/100 != l.streams {
				continue
			}
			inflight[r.stream] += overlap(r.start, r.end, s0, l.end)
			for _, a := range r.arrivals {
				if !a.Before(s0) && a.Before(l.end) {
					tokens++
					got[r.stream]++
				}
			}
		}
		var sum float64
		for s, sec := range inflight {
			sum += got[s] / sec
		}
		table[l.streams] = row{tokens / l.end.Sub(s0).Seconds(), sum / float64(len(inflight))}
	}
	cb := curve.NewBuilder()
	for _, w := range clientWindows(reqs, from.Truncate(window), to, window) {
		cb.Add(w)
	}
	clientCurve := func(floor float64) curve.Curve { return cb.Curves(curve.Options{Floor: floor})[0] }

	c := report.NewClient(influx, db, "", 30*time.Second)
	f, err := report.Plan(ctx, c, report.Filter{From: from, To: to})
	if err != nil {
		t.Fatal(err)
	}
	curves := func(floor float64) map[string]curve.Curve {
		cs, skipped, err := report.OperatingCurves(ctx, c, f, floor)
		if err != nil {
			t.Fatal(err)
		}
		if len(skipped) > 0 {
			t.Errorf("windows skipped: %v", skipped)
		}
		out := map[string]curve.Curve{}
		for _, cv := range cs {
			if cv.Kind == curve.Decode {
				out[cv.Server] = cv
			}
		}
		return out
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
	cws := clientWindows(reqs, from.Truncate(window), to, window)
	fmt.Fprintf(&tab, "| window | client running | sys | per-user |")
	for _, s := range series {
		fmt.Fprintf(&tab, " %s running | sys | per-user |", s.Tags["server"])
	}
	fmt.Fprintln(&tab)
	for i, w := range cws {
		ts := from.Truncate(window).Add(time.Duration(i) * window)
		fmt.Fprintf(&tab, "| %s | %.2f | %.1f | %.1f |", ts.Format("15:04:05.0"), w.Running.V, w.SystemTPS.V, w.PerUserTPS.V)
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
	fmt.Fprintf(&tab, "| level | client table sys | per-user | client windows sys p50 | per-user p50 | server | tpsmon windows | sys p50 | per-user p50 | vs windows sys / per-user | vs table sys / per-user |\n")
	for _, srv := range []string{"llm-m", "llm-l"} {
		cv, ok := got[srv]
		if !ok {
			t.Fatalf("no decode curve for %s in %v", srv, got)
		}
		for _, n := range levels {
			label := fmt.Sprint(n)
			tb, cbn := bin(cv, label), bin(cl, label)
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
	fmt.Fprintf(&tab, "\n| floor | client table level | client windows bin | llm-m bin | llm-m headroom | llm-l bin | llm-l headroom |\n")
	for _, floor := range floors {
		want := 0
		for _, n := range levels {
			if table[n].user >= floor && n > want {
				want = n
			}
		}
		cop := clientCurve(floor).Operating
		line := fmt.Sprintf("| %.0f | %d | %s |", floor, want, cop.Running)
		for _, srv := range []string{"llm-m", "llm-l"} {
			op := curves(floor)[srv].Operating
			h := math.NaN()
			if op.Headroom != nil {
				h = *op.Headroom
			}
			line += fmt.Sprintf(" %s | %.2f |", op.Running, h)
			if want > 0 && op.Running != fmt.Sprint(want) {
				t.Errorf("floor %.0f: %s's operating point %q, the client's table %d (its windows %q)", floor, srv, op.Running, want, cop.Running)
			}
		}
		fmt.Fprintln(&tab, line)
	}
}
