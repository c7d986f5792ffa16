package accuracy

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/tokentruth"
)

// span is one request as the server's own log times it.
type span struct{ arrival, slot, release time.Time }

var (
	elapsedStamp = regexp.MustCompile(`(?:^|\s)(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) [IWED] `)
	slotLine     = regexp.MustCompile(`slot +(\S+) id +(\d+) \| task (-?\d+) \| (selected slot|processing task|stop processing)`)
)

// elapsedOf is a line's llama.cpp --log-timestamps stamp: the time since
// the server started.
func elapsedOf(line string) (time.Duration, bool) {
	m := elapsedStamp.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	var n [4]int64
	for i := range n {
		n[i], _ = strconv.ParseInt(m[i+1], 10, 64)
	}
	return time.Duration(n[0])*time.Minute + time.Duration(n[1])*time.Second + time.Duration(n[2])*time.Millisecond +
		time.Duration(n[3])*time.Microsecond, true
}

// serverSpans reads a llama-server log (--log-timestamps, gzipped) for
// its requests' spans: arrival (the HTTP handler's line, -lv 4; taken by
// launches in order, as the server's queue does; else the slot), slot
// (its "selected slot" line, else its launch) and release ("stop
// processing"), on the server's clock started at origin.
func serverSpans(path string, origin time.Time) ([]span, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sc := bufio.NewScanner(z)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var http []time.Time
	sel := map[string]time.Time{}
	open := map[string]span{}
	var out []span
	for sc.Scan() {
		line := sc.Text()
		el, ok := elapsedOf(line)
		if !ok {
			continue
		}
		t := origin.Add(el)
		if strings.Contains(line, "server_strea: conv_id=") {
			http = append(http, t)
			continue
		}
		s := slotLine.FindStringSubmatch(line)
		if s == nil {
			continue
		}
		slot, key := s[2], s[2]+"/"+s[3]
		switch s[4] {
		case "selected slot":
			sel[slot] = t
		case "processing task":
			sp := span{slot: t}
			if st, ok := sel[slot]; ok {
				sp.slot = st
				delete(sel, slot)
			}
			sp.arrival = sp.slot
			if len(http) > 0 {
				if http[0].Before(sp.arrival) {
					sp.arrival = http[0]
				}
				http = http[1:]
			}
			open[key] = sp
		case "stop processing":
			sp, ok := open[key]
			if !ok {
				return nil, fmt.Errorf("%s: %q releases a task never launched", path, line)
			}
			delete(open, key)
			sp.release = t
			out = append(out, sp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// inFlight is the time-weighted count of spans over [s, s+w).
func inFlight(w time.Duration, s time.Time, spans int, at func(i int) (time.Time, time.Time)) float64 {
	e := s.Add(w)
	var sum time.Duration
	for i := range spans {
		a, b := at(i)
		if a.Before(s) {
			a = s
		}
		if b.After(e) {
			b = e
		}
		if b.After(a) {
			sum += b.Sub(a)
		}
	}
	return sum.Seconds() / w.Seconds()
}

// TestSweepCurveRunning holds tpsmon's running (the concurrency the
// operating curve bins windows by) to the server's own log on both
// recordings of a real llama-server swept through 1-8 streams on 8 slots:
// per level, over the level's whole windows, the mean of tpsmon's running
// read from the log within 1 % of the requests the server held in a slot
// (from its "selected slot" line to its release, time-weighted), and read
// from /metrics (requests_processing, a gauge sampled once a second)
// within 2 %; both within 2 % of the client's requests in flight; and
// every such window in its level's bin. The log's running is the slot's
// span less its last line (the eval line comes 0.5 ms before the release:
// 0.2 % of a 250 ms request), so 1 % holds it with room and fails the
// decode alone (its eval time: 1.5-5.6 % short here, the prompt and the
// slot's set-up missing). The client counts from before its connect to its
// last read: the connection, the HTTP handling, tokenization and the wait
// for the loop's next step come before the slot (5.4 ms a request on
// average in the sweep, 0.8-1.1 % of running), and are not running; the
// table says how much, and how much of it the server's HTTP handler's line
// (-lv 4) sees.
func TestSweepCurveRunning(t *testing.T) {
	type rec struct {
		name     string
		requests string
		window   time.Duration
		// args are the replay's, and origin when the server's clock began.
		args    func(t *testing.T) (args []string, origin time.Time)
		log     string
		metrics bool
	}
	for _, r := range []rec{
		{"sweep (-lv 3, docker-stamped)", "llamacpp-sweep/requests.txt.gz", 10 * time.Second,
			func(t *testing.T) ([]string, time.Time) {
				// The server's clock against the relay's stamps: their
				// smallest difference after the start-up burst (the relay
				// reads a line 0.14 ms after it is written, p50).
				off, err := relayOffset(filepath.Join("testdata", "llamacpp-sweep", "server-stderr-ts.log.gz"))
				if err != nil {
					t.Fatal(err)
				}
				return []string{"--log", gunzip(t, "llamacpp-sweep/server-stderr-ts.log.gz")}, off
			}, "llamacpp-sweep/server-stderr-ts.log.gz", true},
		{"live sweep (-lv 4)", "llamacpp-lv4/requests.txt.gz", 5 * time.Second,
			func(t *testing.T) ([]string, time.Time) {
				raw, err := os.ReadFile(filepath.Join("testdata", "llamacpp-lv4", "started-at.txt"))
				if err != nil {
					t.Fatal(err)
				}
				started, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(raw)))
				if err != nil {
					t.Fatal(err)
				}
				return []string{"--log", gunzip(t, "llamacpp-lv4/server.log.gz"), "--started-at", started.Format(time.RFC3339Nano)}, started
			}, "llamacpp-lv4/server.log.gz", false},
	} {
		t.Run(r.name, func(t *testing.T) {
			reqs, err := tokentruth.LoadRequests(filepath.Join("testdata", r.requests))
			if err != nil {
				t.Fatal(err)
			}
			args, origin := r.args(t)
			spans, err := serverSpans(filepath.Join("testdata", r.log), origin)
			if err != nil {
				t.Fatal(err)
			}
			if len(spans) != len(reqs) {
				t.Fatalf("%d requests in the server's log, %d the client's", len(spans), len(reqs))
			}
			sources := map[string][]point{}
			sources["log"], _ = replayed(t, append(args, "--window", r.window.String())...)
			if r.metrics {
				sources["metrics"], _ = replayed(t, "--metrics-dir", filepath.Join("testdata", "llamacpp-sweep", "metrics"), "--window", r.window.String())
			}
			running := map[string]map[time.Time]float64{}
			for name, pts := range sources {
				running[name] = map[time.Time]float64{}
				for _, p := range pts {
					if v, ok := p.num(schema.FieldRunning); ok {
						running[name][p.Time.UTC()] = v
					}
				}
			}
			// A level's whole windows: every request in flight in it is the
			// level's, and the client had the level's streams all through.
			type level struct {
				windows                             int
				client, arrival, slot, log, metrics float64
				bins                                []string
			}
			levels := map[int]*level{}
			first, last := reqs[0].Start, reqs[0].End
			for _, q := range reqs {
				if q.Start.Before(first) {
					first = q.Start
				}
				if q.End.After(last) {
					last = q.End
				}
			}
			for s := first.Truncate(r.window); s.Before(last); s = s.Add(r.window) {
				n := 0 // the level of every request in flight in it; -1: more than one
				for _, q := range reqs {
					switch {
					case !q.Start.Before(s.Add(r.window)) || !q.End.After(s):
					case n == 0:
						n = q.Level
					case n != q.Level:
						n = -1
					}
				}
				client := inFlight(r.window, s, len(reqs), func(i int) (time.Time, time.Time) { return reqs[i].Start, reqs[i].End })
				if n <= 0 || math.Abs(client-float64(n)) > 0.05 {
					continue
				}
				l := levels[n]
				if l == nil {
					l = &level{}
					levels[n] = l
				}
				l.windows++
				l.client += client
				l.arrival += inFlight(r.window, s, len(spans), func(i int) (time.Time, time.Time) { return spans[i].arrival, spans[i].release })
				l.slot += inFlight(r.window, s, len(spans), func(i int) (time.Time, time.Time) { return spans[i].slot, spans[i].release })
				for _, name := range []string{"log", "metrics"} {
					if _, ok := sources[name]; !ok {
						continue
					}
					v, ok := running[name][s]
					if !ok {
						t.Errorf("%s: no window at %v", name, s)
						continue
					}
					if name == "log" {
						l.log += v
					} else {
						l.metrics += v
					}
					if b := curve.BinOf(v); b != curve.BinOf(float64(n)) {
						l.bins = append(l.bins, fmt.Sprintf("%s %s: %.2f", name, s.Format("15:04:05"), v))
					}
				}
			}
			var tab strings.Builder
			fmt.Fprintf(&tab, "| level | windows | client in flight | server: arrival to release | server: slot to release | tpsmon log | tpsmon metrics | log vs slot | metrics vs slot | log vs client |\n")
			ns := make([]int, 0, len(levels))
			for n := range levels {
				ns = append(ns, n)
			}
			sort.Ints(ns)
			for _, n := range ns {
				l := levels[n]
				k := float64(l.windows)
				l.client, l.arrival, l.slot, l.log, l.metrics = l.client/k, l.arrival/k, l.slot/k, l.log/k, l.metrics/k
				met, vsMet := "–", ""
				if r.metrics {
					met, vsMet = fmt.Sprintf("%.3f", l.metrics), fmt.Sprintf("%+.2f %%", 100*off(l.metrics, l.slot))
				}
				fmt.Fprintf(&tab, "| %d | %d | %.3f | %.3f | %.3f | %.3f | %s | %+.2f %% | %s | %+.2f %% |\n", n, l.windows, l.client, l.arrival, l.slot,
					l.log, met, 100*off(l.log, l.slot), vsMet, 100*off(l.log, l.client))
				if l.windows < 3 {
					t.Errorf("level %d: %d whole windows, want 3 or more", n, l.windows)
				}
				if d := off(l.log, l.slot); math.Abs(d) > 0.01 {
					t.Errorf("level %d: running from the log %.3f, %+.2f %% off the server's slots (%.3f)", n, l.log, 100*d, l.slot)
				}
				if d := off(l.log, l.client); math.Abs(d) > 0.02 {
					t.Errorf("level %d: running from the log %.3f, %+.2f %% off the client's in flight (%.3f)", n, l.log, 100*d, l.client)
				}
				if r.metrics {
					if d := off(l.metrics, l.slot); math.Abs(d) > 0.02 {
						t.Errorf("level %d: running from /metrics %.3f, %+.2f %% off the server's slots (%.3f)", n, l.metrics, 100*d, l.slot)
					}
					if d := off(l.metrics, l.client); math.Abs(d) > 0.02 {
						t.Errorf("level %d: running from /metrics %.3f, %+.2f %% off the client's in flight (%.3f)", n, l.metrics, 100*d, l.client)
					}
				}
				if len(l.bins) > 0 {
					t.Errorf("level %d: windows binned elsewhere: %s", n, strings.Join(l.bins, ", "))
				}
			}
			if want := []int{1, 2, 4, 6, 8}; fmt.Sprint(ns) != fmt.Sprint(want) {
				t.Errorf("levels %v, want %v", ns, want)
			}
			t.Log("\n" + tab.String())
		})
	}
}

// relayOffset is the server's clock start in the relay's: the smallest
// relay stamp less the line's elapsed stamp, over lines after the first 5 s.
func relayOffset(path string) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	sc := bufio.NewScanner(z)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var best time.Time
	for sc.Scan() {
		line := sc.Text()
		stamp, _, _ := strings.Cut(line, " ")
		el, ok := elapsedOf(line)
		wall, err := time.Parse(time.RFC3339Nano, stamp)
		if !ok || err != nil || el < 5*time.Second {
			continue
		}
		if o := wall.Add(-el); best.IsZero() || o.Before(best) {
			best = o
		}
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	if best.IsZero() {
		return time.Time{}, fmt.Errorf("%s: no line with both stamps", path)
	}
	return best, nil
}
