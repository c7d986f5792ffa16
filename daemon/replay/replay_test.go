package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/logsim"
	"github.com/tpsmon/tpsmon/window"
)

// closed collects what a replay writes, copied: the replay reuses the
// windows' storage once WriteWindows returns.
type closed []analysis.Closed

func (c *closed) WriteWindows(cs []analysis.Closed) error {
	for _, w := range cs {
		w.GPUs, w.Servers = slices.Clone(w.GPUs), slices.Clone(w.Servers)
		*c = append(*c, w)
	}
	return nil
}

// bySecond is the server windows written, by their start's second (the
// tests' logs are all within one minute).
func (c closed) bySecond() map[int]analysis.ServerWindow {
	got := map[int]analysis.ServerWindow{}
	for _, cw := range c {
		for _, w := range cw.Servers {
			got[w.Start.Second()] = w
		}
	}
	return got
}

func TestWatchedSpans(t *testing.T) {
	at := func(h float64) time.Time {
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(h * float64(time.Hour)))
	}
	iv := func(from, to float64) sample.Interval { return sample.Interval{Start: at(from), End: at(to)} }
	tests := []struct {
		name     string
		ivs      []sample.Interval
		spans    []span
		silences int
		longest  time.Duration
	}{
		{"none", nil, nil, 0, 0},
		{"one", []sample.Interval{iv(0, 1)}, []span{{at(0), at(1)}}, 0, 0},
		{"overnight idle is watched", []sample.Interval{iv(0, 1), iv(13, 14)}, []span{{at(0), at(14)}}, 0, 0},
		{"out of order, overlapping", []sample.Interval{iv(5, 6), iv(0, 5.5), iv(1, 2)}, []span{{at(0), at(6)}}, 0, 0},
		{"two runs months apart", []sample.Interval{iv(2000, 2001), iv(0, 1), iv(30, 31)},
			[]span{{at(0), at(1)}, {at(30), at(31)}, {at(2000), at(2001)}}, 2, 1969 * time.Hour},
		{"a later line bridges two runs", []sample.Interval{iv(0, 1), iv(49, 50), iv(100, 101), iv(20, 30)},
			[]span{{at(0), at(50)}, {at(100), at(101)}}, 1, 50 * time.Hour},
		{"a long request spans them all", []sample.Interval{iv(30, 31), iv(90, 91), iv(0, 1), iv(10, 80)},
			[]span{{at(0), at(91)}}, 0, 0},
		{"silence of exactly a day is watched", []sample.Interval{iv(24, 25), iv(0, 0)}, []span{{at(0), at(25)}}, 0, 0},
		{"and in order too", []sample.Interval{iv(0, 0), iv(24, 25)}, []span{{at(0), at(25)}}, 0, 0},
		{"a day and a nanosecond is not", []sample.Interval{iv(0, 0), {Start: at(24).Add(1), End: at(25)}},
			[]span{{at(0), at(0)}, {at(24).Add(1), at(25)}}, 1, 24*time.Hour + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ss spanSet
			for _, iv := range tc.ivs {
				ss.add(iv.Start, iv.End)
			}
			spans, silences, longest := ss.result()
			if len(spans) != len(tc.spans) {
				t.Fatalf("spans %v, want %v", spans, tc.spans)
			}
			for i := range spans {
				if !spans[i].from.Equal(tc.spans[i].from) || !spans[i].to.Equal(tc.spans[i].to) {
					t.Errorf("span %d = %v, want %v", i, spans[i], tc.spans[i])
				}
			}
			if silences != tc.silences || longest != tc.longest {
				t.Errorf("silences %d longest %v, want %d %v", silences, longest, tc.silences, tc.longest)
			}
		})
	}
}

// A log holding two runs months apart is two short recordings: the
// windows between them are not written (nor held), and replay says so.
// A log in no order, every line a silence apart: merged with a sort at
// the end, not an insertion each (which took minutes at this size).
func TestWatchedSpansInNoOrder(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 50_000
	var ss spanSet
	for i := range n {
		k := (i * 7919) % n // every k once, in no order (n·48 h fits a Duration)
		from := at.Add(time.Duration(k) * 48 * time.Hour)
		ss.add(from, from.Add(time.Minute))
	}
	spans, silences, longest := ss.result()
	if len(spans) != n || silences != n-1 || longest != 48*time.Hour-time.Minute {
		t.Fatalf("%d stretches, %d silences, longest %v; want %d, %d, 47h59m", len(spans), silences, longest, n, n-1)
	}
	for i := 1; i < n; i++ {
		if !spans[i].from.After(spans[i-1].to) {
			t.Fatalf("stretch %d %v does not follow %v", i, spans[i], spans[i-1])
		}
	}
}

func TestReplayLongSilenceSplits(t *testing.T) {
	var out closed
	var warn bytes.Buffer
	o := Options{LogFile: "testdata/vllm_two_runs_months_apart.log", Engine: "vllm", Year: 2026,
		Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	if err := Run(context.Background(), o, &out, &warn); err != nil {
		t.Fatal(err)
	}
	if n := analysis.Count(out); n == 0 || n > 10 {
		t.Fatalf("%d points for two short runs, want a handful", n)
	}
	for _, c := range out {
		ts := c.Start
		inFirst := ts.After(time.Date(2026, 1, 22, 18, 26, 0, 0, time.UTC)) && ts.Before(time.Date(2026, 1, 22, 18, 28, 0, 0, time.UTC))
		inSecond := ts.After(time.Date(2026, 8, 22, 20, 52, 0, 0, time.UTC)) && ts.Before(time.Date(2026, 8, 22, 20, 53, 0, 0, time.UTC))
		if !inFirst && !inSecond {
			t.Errorf("a window at %s, between the runs", ts)
		}
	}
	if !strings.Contains(warn.String(), "silent for more than 24h0m0s 1 times") {
		t.Errorf("warning %q does not say the log was silent", warn.String())
	}
}

func TestReplayStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out closed
	o := Options{LogFile: "testdata/vllm_two_runs_months_apart.log", Engine: "vllm", Year: 2026,
		Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	err := Run(ctx, o, &out, &bytes.Buffer{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := analysis.Count(out); n != 0 {
		t.Errorf("%d points written after cancel", n)
	}
}

// TestClosingAsTheFeedPassesChangesNothing: the windows of a log closed as
// the feed passes them are those closed all at its end, for logs whose
// lines reach back (llama.cpp requests) or hardly at all, whose stat
// lines come a second apart, that are mostly noise, that fall silent for
// months, and the parser's fixtures.
func TestClosingAsTheFeedPassesChangesNothing(t *testing.T) {
	logs := testLogs(t)
	many := 0
	for _, path := range logs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			o := Options{LogFile: path, Engine: "auto", Year: 2026, Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
			var got [2][]analysis.Closed
			for i, sampled := range []bool{false, true} {
				rec := recording{servers: []window.Server{{Name: o.Server, GPUs: []string{"*"}}}}
				if err := rec.addLog(o, time.UTC, io.Discard); err != nil {
					return // a log replay refuses (no timestamps): other tests see to that
				}
				rec.sampled = sampled // as if scrapes were in: every window closed at the end
				var cs closed
				if err := rec.join(context.Background(), o, &cs); err != nil {
					t.Fatal(err)
				}
				got[i] = cs
			}
			if !reflect.DeepEqual(got[0], got[1]) {
				t.Errorf("closed as the feed passed them:\n%+v\nall at the end:\n%+v", got[0], got[1])
			}
			if len(got[0]) > 12 {
				many++
			}
		})
	}
	if many < 4 {
		t.Errorf("only %d logs made more than 12 windows", many)
	}
}

// testLogs are the logs the join tests replay: the parser's fixtures, a
// log of two runs months apart, and generated ones whose lines reach back
// (llama.cpp requests) or hardly at all, whose stat lines come a second
// apart, and that are mostly noise.
func testLogs(t *testing.T) []string {
	t.Helper()
	logs, _ := filepath.Glob("../../collector/logline/testdata/*.log")
	logs = append(logs, "testdata/vllm_two_runs_months_apart.log")
	dir := t.TempDir()
	start := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	sim := map[string]func(i int) string{
		"stats.log": func(i int) string { return logsim.VLLMStat(start.Add(time.Duration(i)*time.Second), float64(i%200)) },
		"llama.log": func(i int) string {
			// Requests of 5.7 s every 20 ms, and a pause now and then.
			at := start.Add(time.Duration(i)*20*time.Millisecond + time.Duration(i/500)*time.Minute)
			return at.Format(time.RFC3339Nano) + " " + logsim.LlamaEval(i)
		},
	}
	sim["short.log"] = func(i int) string {
		// Requests of 50 ms, shorter than the coverage's longest gap.
		at := start.Add(time.Duration(i)*700*time.Millisecond + 250*time.Millisecond)
		return at.Format(time.RFC3339Nano) + fmt.Sprintf(" slot print_timing: id  0 | task %d |        eval time =      50.00 ms /     3 tokens (   16.67 ms per token,    60.00 tokens per second)\n", i)
	}
	for name, line := range sim {
		if err := logsim.WriteFile(filepath.Join(dir, name), 3000, line); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, filepath.Join(dir, name))
	}
	f, err := os.Create(filepath.Join(dir, "noisy.log"))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(logsim.NoisyVLLM(f, 30_000, start), f.Close()); err != nil {
		t.Fatal(err)
	}
	logs = append(logs, f.Name())
	return logs
}

// A log alone is fed a stretch at a time: each stretch's segment is the
// one the feed's own pass finds, input for input.
func TestStretchesAreTheFeedsSegments(t *testing.T) {
	for _, path := range testLogs(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			o := Options{LogFile: path, Engine: "auto", Year: 2026, Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
			rec := recording{servers: []window.Server{{Name: o.Server, GPUs: []string{"*"}}}}
			if err := rec.addLog(o, time.UTC, io.Discard); err != nil {
				return
			}
			f := newFeed(&rec.logs, nil, rec.watched)
			i := 0
			for ; !f.done(); i++ {
				want := f.segment()
				if i >= len(rec.segments) {
					t.Fatalf("the feed has segment %d %+v, the stretches only %d", i, want, len(rec.segments))
				}
				if got := rec.segments[i]; got != want {
					t.Fatalf("segment %d: stretch says %+v, the feed %+v", i, got, want)
				}
				for range want.n {
					f.next()
				}
			}
			if i != len(rec.segments) {
				t.Errorf("%d stretches, the feed has %d segments", len(rec.segments), i)
			}
		})
	}
}

// A line with an impossible value (a request that ran for three years) is
// refused, and replay says how many and why, instead of spreading its
// tokens over years of windows.
func TestReplaySaysWhatItRefused(t *testing.T) {
	var out closed
	var warn bytes.Buffer
	o := Options{LogFile: "testdata/llama_misprinted_duration.log", Engine: "auto", Year: 2026,
		Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	if err := Run(context.Background(), o, &out, &warn); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warn.String(), "1 throughput lines refused, interval huge") {
		t.Errorf("warnings %q do not name the refused line", warn.String())
	}
	if n := analysis.Count(out); n == 0 || n > 4 {
		t.Errorf("%d points, want those of the one good line", n)
	}
}

// A vLLM line with an absurd rate is refused, and the 10 s it spoke for,
// (10:00:15, 10:00:25], are a hole, as live (daemon/agent's
// TestRefusedLogLineIsAHole, on the same log): its windows are half
// observed, with the valid lines' tokens, never idle or whole.
func TestReplayRefusedLineIsAHole(t *testing.T) {
	var out closed
	var warn bytes.Buffer
	o := Options{LogFile: "testdata/vllm_refused_line.log", Engine: "auto", Year: 2026,
		Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	if err := Run(context.Background(), o, &out, &warn); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warn.String(), "1 throughput lines refused, tokens huge") {
		t.Errorf("warnings %q do not name the refused line", warn.String())
	}
	got := out.bySecond()
	for _, tc := range []struct {
		start    int // seconds after 10:00
		tokens   int64
		coverage float64
	}{
		{10, 100, 0.5}, // half of (5, 15]; (15, 20] is the hole
		{20, 100, 0.5}, // (20, 25] is the hole; half of (25, 35]
		{30, 200, 1},   // halves of (25, 35] and (35, 45]
	} {
		w, ok := got[tc.start]
		if !ok {
			t.Errorf("window 10:00:%02d not written", tc.start)
			continue
		}
		if w.Tokens != window.Some(tc.tokens) || w.Coverage != tc.coverage || w.State != schema.StateOK ||
			w.SystemTPS != window.Some(20.0) {
			t.Errorf("window 10:00:%02d: tokens %v coverage %v system_tps %v state %s, want %d at %v, 20, ok",
				tc.start, w.Tokens, w.Coverage, w.SystemTPS, w.State, tc.tokens, tc.coverage)
		}
	}
}

// Inputs stamped in years line protocol cannot hold (which the windows'
// arithmetic overflows on: a log line of year 9999 made replay allocate
// until it was killed) are refused, each kind with a message that says so.
func TestReplayRefusesTimesOutsideLineProtocol(t *testing.T) {
	dir := t.TempDir()
	page, err := os.ReadFile("../../cmd/tpsmon/testdata/replay/metrics/1700000000500.prom")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("m/1700000000500.prom", string(page))
	write("m/99999999999999999.prom", string(page))
	eval := " slot print_timing: id  0 | task %d |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)\n"
	log := write("s.log", fmt.Sprintf("2026-05-19T10:00:10Z"+eval+"9999-12-31T23:59:59Z"+eval, 1, 2))
	csv := write("g.csv", "timestamp, index, uuid, utilization.gpu [%]\n9999/12/31 23:59:59.000, 0, GPU-1, 50 %\n")
	for _, tc := range []struct {
		name    string
		o       Options
		err     string // of Run
		warning string
	}{
		{"log line", Options{LogFile: log}, "", "1 throughput lines refused, interval range"},
		{"metrics file", Options{MetricsDir: filepath.Join(dir, "m")}, "", "99999999999999999.prom: its time is outside 1677-2262"},
		{"GPU reading", Options{GPUCSV: csv}, `line 2: timestamp "9999/12/31 23:59:59.000": outside 1677-2262`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Engine, o.Year, o.Window, o.Server, o.Host, o.TZ = "auto", 2026, 10*time.Second, "s", "h", "UTC"
			var out closed
			var warn bytes.Buffer
			err := Run(context.Background(), o, &out, &warn)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(warn.String(), tc.warning) {
				t.Errorf("warnings %q, want %q", warn.String(), tc.warning)
			}
			for _, c := range out {
				if y := c.Start.Year(); y != 2026 && y != 2023 {
					t.Errorf("a window of %v", c.Start)
				}
			}
		})
	}
}

// A recorded GPU reading no GPU gives (1e300 W, 500 %, a size past int64)
// is dropped, and replay says how many and why; the readings around it
// are joined as recorded.
func TestReplayRefusesImpossibleGPUReadings(t *testing.T) {
	var out closed
	var warn bytes.Buffer
	o := Options{GPUCSV: "testdata/gpu_impossible_readings.csv", Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	if err := Run(context.Background(), o, &out, &warn); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"1 GPU readings refused, gpu_power huge", "1 GPU readings refused, gpu_power inf",
		"1 GPU readings refused, gpu_util huge", "1 GPU readings refused, gpu_util negative",
		"1 GPU readings refused, gpu_mem_util nan", "1 GPU readings refused, gpu_memory huge"} {
		if !strings.Contains(warn.String(), w) {
			t.Errorf("warnings %q do not say %q", warn.String(), w)
		}
	}
	if len(out) != 1 || len(out[0].GPUs) != 1 {
		t.Fatalf("windows %+v, want one of one GPU", out)
	}
	g := out[0].GPUs[0]
	if g.PowerW.V != 300 || g.Util.V != 50 || !g.EnergyJ.OK || g.EnergyJ.V < 899 || g.EnergyJ.V > 901 {
		t.Errorf("power %v W, util %v %%, energy %v J: want the good readings' 300 W, 50 %%, 900 J", g.PowerW, g.Util, g.EnergyJ)
	}
}

// A GPU CSV row that does not say which GPU it is, or says it in a way no
// index reads (a float, a name, a negative number), is an error naming the
// row, not a reading of GPU 0.
func TestReplayGPUCSVRowsNameTheirGPU(t *testing.T) {
	for _, tc := range []struct{ index, uuid, want string }{
		{"abc", "GPU-1", `line 2: index "abc": want a GPU's index, 0 to 1023`},
		{"2.5", "GPU-1", `line 2: index "2.5"`},
		{"-1", "GPU-1", `line 2: index "-1"`},
		{"NaN", "GPU-1", `line 2: index "NaN"`},
		{"99999999999999999999", "GPU-1", `line 2: index "99999999999999999999"`},
		{"0", "", "line 2: no uuid"},
		{"0", "[N/A]", "line 2: no uuid"},
	} {
		t.Run(tc.index+" "+tc.uuid, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gpu.csv")
			text := "timestamp, index, uuid, utilization.gpu [%]\n2026/05/19 10:00:00.000, " + tc.index + ", " + tc.uuid + ", 50 %\n"
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			err := Run(context.Background(), Options{GPUCSV: path, Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}, &closed{}, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// A scraped value no server gives (a counter of 1e300) is refused as the
// daemon refuses it, and replay says so.
func TestReplaySaysWhichMetricValuesItRefused(t *testing.T) {
	dir := t.TempDir()
	src := "../../cmd/tpsmon/testdata/replay/metrics"
	names := []string{"1700000000500.prom", "1700000001500.prom", "1700000002500.prom"}
	for i, n := range names {
		b, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			b = bytes.Replace(b, []byte(`vllm:generation_tokens_total{model_name="replay/model"} 120.0`),
				[]byte(`vllm:generation_tokens_total{model_name="replay/model"} 1e300`), 1)
			if !bytes.Contains(b, []byte("1e300")) {
				t.Fatal("the fixture changed: no counter to break")
			}
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var warn bytes.Buffer
	o := Options{MetricsDir: dir, Engine: "auto", Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	if err := Run(context.Background(), o, &closed{}, &warn); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warn.String(), "1 metric values refused, generation_tokens huge") {
		t.Errorf("warnings %q do not name the refused counter", warn.String())
	}
}

func TestTrimEOLIsTrimRight(t *testing.T) {
	for _, s := range []string{"", "\n", "\r\n", "a", "a\n", "a\r\n", "a\r\r\n\n", "\r", "a\nb\r\n", "a \n", "\n\ra"} {
		if got, want := trimEOL([]byte(s)), bytes.TrimRight([]byte(s), "\r\n"); !bytes.Equal(got, want) {
			t.Errorf("trimEOL(%q) = %q, bytes.TrimRight says %q", s, got, want)
		}
	}
}

// TestSGLangGenThroughputOnlyPerUser: a page with only sglang:gen_throughput
// and the running count (SGLang 0.5.1's scheduler gauges, issue 13485, no
// latency histograms) gives the per-user speed as the system rate over the
// running requests, as the README says. The page is the real one; its
// gauges are set to 4 running at 400 tok/s and it is scraped each second.
func TestSGLangGenThroughputOnlyPerUser(t *testing.T) {
	page, err := os.ReadFile("testdata/wild/sglang-2025-issue13485-v0.5.1-gen-throughput-only/1763424000000.prom")
	if err != nil {
		t.Fatal(err)
	}
	page = bytes.Replace(page, []byte(`tp_rank="0"} 0.8371284457403783`), []byte(`tp_rank="0"} 400.0`), 1)
	page = bytes.Replace(page, []byte(`sglang:num_running_reqs{engine_type="unified",model_name="Qwen-32B",pp_rank="0",tp_rank="0"} 1.0`),
		[]byte(`sglang:num_running_reqs{engine_type="unified",model_name="Qwen-32B",pp_rank="0",tp_rank="0"} 4.0`), 1)
	if bytes.Count(page, []byte("400.0")) != 1 || bytes.Count(page, []byte("} 4.0")) != 1 {
		t.Fatal("the page changed: no gauges to set")
	}
	dir := t.TempDir()
	start := time.Date(2025, 11, 18, 0, 0, 0, 0, time.UTC)
	for i := range 21 {
		name := fmt.Sprintf("%d.prom", start.Add(time.Duration(i)*time.Second).UnixMilli())
		if err := os.WriteFile(filepath.Join(dir, name), page, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out closed
	var warn bytes.Buffer
	o := Options{MetricsDir: dir, Engine: "auto", Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	if err := Run(context.Background(), o, &out, &warn); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range out {
		for _, w := range c.Servers {
			if !w.SystemTPS.OK || w.SystemTPS.V < 399 || w.SystemTPS.V > 401 {
				continue
			}
			n++
			if !w.PerUserTPS.OK || math.Abs(w.PerUserTPS.V-100) > 0.5 {
				t.Errorf("window %s: per_user_tps %v, want 400 tok/s over 4 running = 100", w.Start.Format(time.TimeOnly), w.PerUserTPS)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no window at the page's 400 tok/s (warnings: %s)", warn.String())
	}
}

// TestReplayTGIFailuresAreMisses: a request's own ERROR line (its
// generation failed, its input was refused) counts in its window as a
// request that met no objective, and nothing else; the batch loop's error
// is no request. The lines are in the shapes of the real ones in
// collector/logline/testdata (tgi_success_span_*.log,
// tgi_request_errors_issues.log), written at the times the test needs.
func TestReplayTGIFailuresAreMisses(t *testing.T) {
	var out closed
	o := Options{LogFile: "testdata/tgi_failed_requests.log", Engine: "auto", Year: 2026,
		Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	o.Facts.SLO.Objective = latency.Objective{TPOT: 50 * time.Millisecond}
	if err := Run(context.Background(), o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	got := out.bySecond()
	for _, tc := range []struct {
		start         int // seconds after 10:00
		requests, met float64
		tokens        int64
		attainment    float64
	}{
		{0, 4, 2, 50 + 25 + 40, 0.5}, // 20 and 25 ms met, 80 ms and the failure did not
		{10, 2, 1, 50, 0.5},          // the refused input is a miss
	} {
		w, ok := got[tc.start]
		if !ok {
			t.Fatalf("window 10:00:%02d not written", tc.start)
		}
		a := w.Latency.Attainment
		if !a.OK || !a.Exact || a.Requests != tc.requests || a.Lo != tc.attainment || a.MetLo != tc.met {
			t.Errorf("window 10:00:%02d: attainment %+v, want %g of %g requests exactly", tc.start, a, tc.attainment, tc.requests)
		}
		if w.Tokens != window.Some(tc.tokens) {
			t.Errorf("window 10:00:%02d: tokens %+v, want %d", tc.start, w.Tokens, tc.tokens)
		}
	}
}
