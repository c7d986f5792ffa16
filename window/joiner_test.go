package window

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
)

var t0 = time.Unix(1_700_000_000, 0) // a multiple of 10 s

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// scrape is one server reading: the generation counter and a running gauge.
type scrape struct {
	t       float64
	tokens  float64
	running float64
}

func reading(s scrape) sample.Server {
	var smp sample.Server
	smp.Time = at(s.t)
	smp.SetCounter(sample.GenerationTokens, s.tokens)
	smp.SetGauge(sample.Running, s.running)
	return smp
}

// steady returns scrapes every step seconds in [from, to) of a counter
// growing at rate per second from base.
func steady(from, to, step, rate, base float64) []scrape {
	var out []scrape
	for t := from; t < to-1e-9; t += step {
		out = append(out, scrape{t: t, tokens: base + rate*(t-from), running: 4})
	}
	return out
}

// servers returns the server windows of cs, oldest first.
func servers(cs []Closed) []ServerWindow {
	var out []ServerWindow
	for _, c := range cs {
		out = append(out, c.Servers...)
	}
	return out
}

func newJoiner(start float64) *Joiner {
	return New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond,
		Host: "node-a", Start: at(start)}, []Server{{Name: "llm", Engine: "vllm", GPUs: []string{"0"}}})
}

// serverWindows feeds scrapes and returns the server's result of every
// window closed by a flush at the given time.
func serverWindows(t *testing.T, j *Joiner, scrapes []scrape, flushAt float64) []ServerWindow {
	t.Helper()
	for _, s := range scrapes {
		j.AddServer("llm", reading(s))
	}
	return servers(j.Flush(at(flushAt)))
}

type want struct {
	start    float64
	tokens   Opt[int64] // absent: no token count
	tps      float64
	coverage float64
	down     bool // no source spoke for it
}

func TestJoinerWindows(t *testing.T) {
	tests := []struct {
		name    string
		start   float64
		scrapes []scrape
		flushAt float64
		want    []want
	}{
		{
			name:    "steady scrapes on every second, edges included",
			scrapes: steady(0, 31, 1, 100, 5000),
			flushAt: 35,
			want: []want{
				{0, Some[int64](1000), 100, 1, false},
				{10, Some[int64](1000), 100, 1, false},
				{20, Some[int64](1000), 100, 1, false},
			},
		},
		{
			name: "tokens split across the edge in proportion to time",
			scrapes: []scrape{
				{t: 8.5, tokens: 0, running: 1}, {t: 9.5, tokens: 0, running: 1},
				{t: 10.5, tokens: 100, running: 1}, {t: 11.5, tokens: 100, running: 1},
				{t: 12.5, tokens: 100, running: 1}, {t: 19.5, tokens: 100, running: 1}, {t: 20.5, tokens: 100, running: 1},
			},
			flushAt: 25,
			want: []want{
				// [0,10): the counter started at 8.5; half of the 9.5..10.5 jump.
				{0, Some[int64](50), 50 / 1.5, 0.15, false},
				// [10,20): the other half; 12.5..19.5 is a gap longer than MaxGap.
				{10, Some[int64](50), 50 / 3.0, 0.3, false},
			},
		},
		{
			name:    "missing scrapes: tokens kept, coverage lowered",
			scrapes: append(steady(0, 13, 1, 10, 0), steady(17, 31, 1, 10, 170)...),
			flushAt: 35,
			want: []want{
				{0, Some[int64](100), 10, 1, false},
				// 12..17 is a 5 s gap: its 50 tokens land at 17, inside the
				// window, but the rate is the 50 seen over the 5 s observed.
				{10, Some[int64](100), 50 / 5.0, 0.5, false},
				{20, Some[int64](100), 10, 1, false},
			},
		},
		{
			name: "counter reset mid-window counts the new value, never negative",
			scrapes: append(steady(0, 15, 1, 100, 90000),
				steady(15, 31, 1, 100, 0)...), // restarted at 15 from 0
			flushAt: 35,
			want: []want{
				{0, Some[int64](1000), 100, 1, false},
				// 10..14 gives 400 (and the edge at 10), then the reset drops
				// the 14..15 second: 0 is the new value, then 15..20 gives 500.
				{10, Some[int64](900), 90, 1, false},
				{20, Some[int64](1000), 100, 1, false},
			},
		},
		{
			name:    "server starts mid-window: partial coverage, rate over what was seen",
			scrapes: steady(14, 31, 1, 20, 0),
			flushAt: 35,
			want: []want{
				{0, Opt[int64]{}, 0, 0, true},
				{10, Some[int64](120), 20, 0.6, false},
				{20, Some[int64](200), 20, 1, false},
			},
		},
		{
			name:    "no scrapes at all: down, nothing invented",
			flushAt: 25,
			want:    []want{{0, Opt[int64]{}, 0, 0, true}, {10, Opt[int64]{}, 0, 0, true}},
		},
		{
			name:    "idle server",
			scrapes: []scrape{{0, 7, 0}, {1, 7, 0}, {2, 7, 0}, {3, 7, 0}, {4, 7, 0}, {5, 7, 0}, {6, 7, 0}, {7, 7, 0}, {8, 7, 0}, {9, 7, 0}, {10, 7, 0}},
			flushAt: 15,
			want:    []want{{0, Some[int64](0), 0, 1, false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := serverWindows(t, newJoiner(tt.start), tt.scrapes, tt.flushAt)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d windows, want %d", len(got), len(tt.want))
			}
			for i, w := range tt.want {
				g := got[i]
				if !g.Start.Equal(at(w.start)) {
					t.Errorf("window %d starts %v, want %v", i, g.Start, at(w.start))
				}
				if g.Tokens != w.tokens {
					t.Errorf("window %d tokens = %v, want %v", i, g.Tokens, w.tokens)
				}
				if w.tokens.OK {
					if math.Abs(g.SystemTPS.V-w.tps) > 1e-6 {
						t.Errorf("window %d system_tps = %v, want %v", i, g.SystemTPS, w.tps)
					}
				} else if g.SystemTPS.OK {
					t.Errorf("window %d has system_tps without data", i)
				}
				if math.Abs(g.Coverage-w.coverage) > 1e-9 {
					t.Errorf("window %d coverage = %v, want %v", i, g.Coverage, w.coverage)
				}
				if g.Down != w.down {
					t.Errorf("window %d down = %v, want %v", i, g.Down, w.down)
				}
			}
		})
	}
}

func TestJoinerConservesTokens(t *testing.T) {
	// Irregular scrapes, a reset and a gap: the windows' integer tokens
	// add up to the counter's total increase.
	j := newJoiner(0)
	scr := []scrape{{0.3, 10, 1}, {1.7, 47, 1}, {3.1, 90, 1}, {9.99, 333, 1}, {10.01, 334, 1},
		{14.2, 500, 1}, {19.9, 12, 1}, {20.3, 40, 1}, {26.6, 777, 1}, {33.3, 1001, 1}}
	var sum int64
	for _, w := range serverWindows(t, j, scr, 45) {
		if n, ok := w.Tokens.V, w.Tokens.OK; ok {
			if n < 0 {
				t.Errorf("negative tokens %d", n)
			}
			sum += n
		}
	}
	// 10 -> 500, reset to 12, -> 1001: (500-10) + 12 + (1001-12).
	if want := int64(490 + 12 + 989); sum != want {
		t.Errorf("tokens over all windows = %d, want %d", sum, want)
	}
}

func TestJoinerLateSamples(t *testing.T) {
	j := newJoiner(0)
	serverWindows(t, j, steady(0, 16, 1, 10, 0), 15) // closes [0,10)
	if ok := j.AddServer("llm", reading(scrape{t: 9.9, tokens: 99})); ok {
		t.Error("a sample for a closed window was accepted")
	}
	if ok := j.AddGPU(sample.GPU{Time: at(5), UUID: "GPU-x"}); ok {
		t.Error("a GPU sample for a closed window was accepted")
	}
	if j.Late() != 2 {
		t.Errorf("late = %d, want 2", j.Late())
	}
	// The open window is unaffected: still exactly 10 tokens/s.
	ws := serverWindows(t, j, steady(16, 21, 1, 10, 160), 25)
	if ws[0].Tokens != Some[int64](100) {
		t.Errorf("window after a late sample: tokens %v, want 100", ws[0].Tokens)
	}
}

// An interval that reaches back before the first window (a log's first
// line read after the start speaks of the time before it) loses that
// part, which no window of this joiner covers: counted apart, not late.
// What falls in windows already closed is late; the rest is kept.
func TestJoinerTimeBeforeFirstWindowIsNotLate(t *testing.T) {
	cases := []struct {
		name     string
		closeAt  float64 // flush here first (0: none)
		from, to float64 // the interval, 100 tokens
		before   float64 // tokens counted before the first window
		late     float64
		lateN    uint64
		kept     int64 // in the windows written
	}{
		{"reaches before the start", 0, -4, 6, 40, 0, 0, 60},
		{"wholly before the start", 0, -5, -1, 100, 0, 0, 0},
		{"ends at the first window's start", 0, -5, 0, 100, 0, 0, 0},
		{"from before the start over a closed window", 15, -5, 15, 25, 50, 1, 25},
		{"in a closed window only", 15, 2, 7, 0, 100, 1, 0},
		{"over a closed window's end", 15, 8, 12, 0, 50, 1, 50},
		{"an instant before the start", 0, -1, -1, 100, 0, 0, 0},
		{"an instant in a closed window", 15, 5, 5, 0, 100, 1, 0},
		{"inside the first window", 0, 4, 6, 0, 0, 0, 100},
		{"NaN tokens before the start", 0, -4, -1, 0, 0, 0, 0},
		{"NaN tokens in a closed window", 15, 2, 7, 0, 0, 1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := newJoiner(3) // the first window is [0, 10)
			var kept int64
			if c.closeAt > 0 {
				for _, w := range servers(j.Flush(at(c.closeAt))) {
					kept += w.Tokens.V
				}
			}
			iv := sample.Unknown(at(c.from), at(c.to))
			iv.Tokens = 100
			if strings.HasPrefix(c.name, "NaN") {
				iv.Tokens = math.NaN()
			}
			j.AddLog("llm", iv)
			for _, w := range servers(j.Close(at(40))) {
				kept += w.Tokens.V
			}
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9 } // false for NaN
			if !near(j.BeforeTokens(), c.before) || !near(j.LateTokens(), c.late) || j.Late() != c.lateN {
				t.Errorf("before the first window %v, late %v in %d intervals; want %v, %v in %d",
					j.BeforeTokens(), j.LateTokens(), j.Late(), c.before, c.late, c.lateN)
			}
			if kept != c.kept {
				t.Errorf("windows hold %d tokens, want %d", kept, c.kept)
			}
		})
	}
}

func TestJoinerGraceWaitsForLateScrape(t *testing.T) {
	j := newJoiner(0)
	serverWindows(t, j, steady(0, 10, 1, 10, 0), 14.9)
	if cs := j.Flush(at(14.9)); len(cs) != 0 {
		t.Fatalf("window closed before end+grace: %d windows", len(cs))
	}
	// The scrape after the edge arrives within grace and brackets it.
	ws := serverWindows(t, j, []scrape{{t: 11, tokens: 110, running: 4}}, 15)
	if len(ws) != 1 || ws[0].Tokens != Some[int64](100) || ws[0].Coverage != 1.0 {
		t.Fatalf("got %+v", ws)
	}
}

func TestJoinerClosePartial(t *testing.T) {
	j := newJoiner(0)
	for _, s := range steady(0, 14, 1, 10, 0) {
		j.AddServer("llm", reading(s))
	}
	srv := servers(j.Close(at(13.5)))
	if len(srv) != 2 {
		t.Fatalf("Close gave %d server windows, want 2", len(srv))
	}
	if f := srv[1]; f.Tokens != Some[int64](30) || math.Abs(f.Coverage-0.3) > 1e-9 {
		t.Errorf("partial window: tokens %v coverage %v, want 30 and 0.3", f.Tokens, f.Coverage)
	}
}

func gpuSample(sec float64, util, power float64, energyMJ int64) sample.GPU {
	return sample.GPU{Time: at(sec), Index: 0, UUID: "GPU-0", Name: "H100",
		UtilPct: util, PowerW: power, EnergyMJ: energyMJ, MemUsedBytes: 70 << 30, MemTotalBytes: 80 << 30,
		Has: sample.FieldUtil | sample.FieldPower | sample.FieldEnergy | sample.FieldMemory}
}

func TestJoinerGPUAndServerJoin(t *testing.T) {
	j := newJoiner(0)
	for i := 0; i <= 20; i++ {
		// 500 W from the energy counter; utilization alternates 50/70.
		util := 50.0
		if i%2 == 1 {
			util = 70
		}
		j.AddGPU(gpuSample(float64(i), util, 480, int64(i)*500_000))
		j.AddServer("llm", reading(scrape{t: float64(i), tokens: float64(i) * 1000, running: 8}))
	}
	j.AddGPU(sample.GPU{Time: at(3), Index: 1, UUID: "GPU-1", Name: "H100", Err: errors.New("gpu 1: GPU is lost")})
	cs := j.Flush(at(15))
	if len(cs) != 1 || len(cs[0].GPUs) != 2 || len(cs[0].Servers) != 1 {
		t.Fatalf("got %+v, want one window of 2 GPUs + 1 server", cs)
	}
	g0, g1, srv := cs[0].GPUs[0], cs[0].GPUs[1], cs[0].Servers[0]
	if g0.Server != "llm" || g1.Server != "" {
		t.Errorf("gpu server tags %q %q", g0.Server, g1.Server)
	}
	if g0.Util != Some(60.0) || g0.UtilMax != Some(70.0) || g0.EnergyJ != Some(5000.0) || g0.Samples != 10 {
		t.Errorf("gpu 0 %+v", g0)
	}
	if g1.Error != Some("gpu 1: GPU is lost") || g1.Samples != 0 || g1.Coverage != 0 {
		t.Errorf("lost gpu %+v", g1)
	}
	if g1.Util.OK {
		t.Error("lost GPU reports a utilization")
	}
	if len(srv.GPUs) != 1 || srv.GPUs[0] != "0" {
		t.Errorf("server gpus %q", srv.GPUs)
	}
	if srv.TokensPerJoule != Some(2.0) || srv.TPSPerGPU != Some(1000.0) || srv.PowerW != Some(480.0) {
		t.Errorf("server join %+v", srv)
	}
	if srv.MemUsedBytes != Some[int64](70<<30) || srv.GPUUtil != Some(60.0) {
		t.Errorf("server gpu fields %+v", srv)
	}
}

func TestJoinerEnergyFallsBackToPower(t *testing.T) {
	j := newJoiner(0)
	for i := 0; i <= 11; i++ {
		s := gpuSample(float64(i), 10, 300, 0)
		s.Has &^= sample.FieldEnergy
		j.AddGPU(s)
	}
	g := j.Flush(at(15))[0].GPUs[0]
	if g.EnergyJ != Some(3000.0) || g.EnergySource != Some(schema.EnergyPower) {
		t.Errorf("energy from power = %v (%v), want 3000", g.EnergyJ, g.EnergySource)
	}
}

func TestJoinerSkipsAheadAfterClockJump(t *testing.T) {
	j := newJoiner(0)
	cs := j.Flush(at(1e6))
	if n := len(cs); n != maxCatchUp {
		t.Errorf("closed %d windows after a jump, want at most %d", n, maxCatchUp)
	}
	if j.Skipped() == 0 {
		t.Error("skipped windows not counted")
	}
}

func TestJoinerSetServersKeepsSeries(t *testing.T) {
	j := newJoiner(0)
	for _, s := range steady(0, 14, 1, 10, 0) {
		j.AddServer("llm", reading(s))
	}
	j.SetServers([]Server{{Name: "llm", Engine: "vllm"}, {Name: "new", Engine: "vllm"}}, 2500*time.Millisecond)
	for _, s := range steady(14, 21, 1, 10, 140) {
		j.AddServer("llm", reading(s))
	}
	var srv []ServerWindow
	for _, w := range servers(j.Flush(at(25))) {
		if w.Server == "llm" {
			srv = append(srv, w)
		}
	}
	if len(srv) != 2 || srv[1].Tokens != Some[int64](100) || srv[1].Coverage != 1.0 {
		t.Errorf("series broken by the reload: %+v", srv)
	}
}

func TestJoinerGPUDriverSamplesAndGPM(t *testing.T) {
	j := newJoiner(0)
	// One reading a second, each carrying the driver's 6 samples of it:
	// the 1 Hz value (99) must not be what the window reports.
	for i := 0; i <= 10; i++ {
		s := gpuSample(float64(i), 99, 300, int64(i)*300_000)
		for k := range 6 {
			pct := 20.0
			if k == 5 {
				pct = 80
			}
			s.UtilSamples = append(s.UtilSamples, sample.UtilSample{Time: at(float64(i) - 1 + float64(k+1)/6), Pct: pct})
		}
		s.SMActive, s.SMOccupancy, s.TensorActive, s.DRAMActive = 35, 20, 15, 50
		s.Has |= sample.FieldGPM
		j.AddGPU(s)
		j.AddServer("llm", reading(scrape{t: float64(i), tokens: float64(i) * 100, running: 4}))
	}
	cs := j.Flush(at(15))
	g, srv := cs[0].GPUs[0], cs[0].Servers[0]
	if !g.Util.OK || math.Abs(g.Util.V-30) > 1e-9 || g.UtilMax != Some(80.0) {
		t.Errorf("util %v max %v, want the driver samples' 30 and 80", g.Util, g.UtilMax)
	}
	if g.SMActive != Some(35.0) || g.TensorActive != Some(15.0) || g.DRAMActive != Some(50.0) || g.EnergySource != Some(schema.EnergyCounter) {
		t.Errorf("gpu %+v", g)
	}
	// The server sees its GPU's SM activity and utilization, which
	// the verdict weighs (analysis.State).
	if srv.SMActive != Some(35.0) || !srv.GPUUtil.OK || math.Abs(srv.GPUUtil.V-30) > 1e-9 {
		t.Errorf("server sm_active %v gpu_util %v", srv.SMActive, srv.GPUUtil)
	}
}

func TestJoinerEnergyCounterReset(t *testing.T) {
	j := newJoiner(0)
	// The driver reloaded at 5 s: its counter restarted from 0.
	for i := 0; i <= 10; i++ {
		e := int64(1_000_000_000 + i*200_000)
		if i >= 5 {
			e = int64((i - 5) * 200_000)
		}
		j.AddGPU(gpuSample(float64(i), 50, 200, e))
	}
	g := j.Flush(at(15))[0].GPUs[0]
	// 4 s before the reset and 5 s after; the second of the reset counts
	// what the new counter says (0).
	if g.EnergyJ != Some(1800.0) {
		t.Errorf("energy across a reset %v, want 1800", g.EnergyJ)
	}
}

// A log names its server: the engine once (Ollama's own lines turn a
// detected llamacpp into ollama, a configured engine stays), the model
// whenever it says.
func TestJoinerNamesFromLogs(t *testing.T) {
	cases := []struct {
		name       string
		configured string
		names      [][2]string // engine, model, in order
		wantEngine string
		wantModel  string
	}{
		{"detected llamacpp, then Ollama's lines", "", [][2]string{{"llamacpp", ""}, {"ollama", "randnb:latest"}}, "ollama", "randnb:latest"},
		{"configured llamacpp stays", "llamacpp", [][2]string{{"ollama", "m"}}, "llamacpp", "m"},
		{"first engine sticks otherwise", "", [][2]string{{"vllm", ""}, {"sglang", ""}}, "vllm", ""},
	}
	for _, c := range cases {
		j := New(Config{Window: 10 * time.Second, MaxGap: time.Second, Start: at(0)},
			[]Server{{Name: "llm", Engine: c.configured, Source: schema.SourceLog}})
		for _, n := range c.names {
			j.NameEngine("llm", n[0])
			j.NameModel("llm", n[1])
		}
		j.Watch("llm", at(1))
		srv := servers(j.Close(at(5)))
		if w := srv[len(srv)-1]; w.Engine != c.wantEngine || w.Model != c.wantModel {
			t.Errorf("%s: engine %q model %q, want %q and %q", c.name, w.Engine, w.Model, c.wantEngine, c.wantModel)
		}
	}
}

// A source that states the engine's version names it for the windows
// closed after (a restart's new version replaces it); unknown, they carry
// none; a reload keeps it.
func TestJoinerNamesVersion(t *testing.T) {
	j := New(Config{Window: 10 * time.Second, MaxGap: time.Second, Start: at(0)},
		[]Server{{Name: "llm", Source: schema.SourceLog}})
	close := func(s float64) ServerWindow {
		j.Watch("llm", at(s-9))
		srv := servers(j.Close(at(s)))
		return srv[len(srv)-1]
	}
	if w := close(10); w.EngineVersion != "" {
		t.Errorf("before any version: %q", w.EngineVersion)
	}
	j.NameVersion("llm", "0.34.1")
	j.NameVersion("llm", "") // a line without one changes nothing
	j.NameVersion("other", "9")
	if w := close(20); w.EngineVersion != "0.34.1" {
		t.Errorf("named: %q, want 0.34.1", w.EngineVersion)
	}
	j.SetServers([]Server{{Name: "llm", Source: schema.SourceLog}}, time.Second)
	if w := close(30); w.EngineVersion != "0.34.1" {
		t.Errorf("after a reload: %q, want 0.34.1", w.EngineVersion)
	}
	j.NameVersion("llm", "0.35.0")
	if w := close(40); w.EngineVersion != "0.35.0" {
		t.Errorf("restarted: %q, want 0.35.0", w.EngineVersion)
	}
}

// In a window the server and its GPU were watched for different
// stretches, tokens per joule divides rates over each one's own stretch:
// the steady 2 tokens/J, not the tokens of 3 s over the energy of 7 s.
func TestJoinerTokensPerJouleOnOneTimeBase(t *testing.T) {
	j := newJoiner(0)
	for i := 0; i <= 7; i++ {
		j.AddGPU(gpuSample(float64(i), 50, 500, int64(i)*500_000)) // 500 W
	}
	for i := 4; i <= 7; i++ {
		j.AddServer("llm", reading(scrape{t: float64(i), tokens: float64(i) * 1000, running: 8})) // 1000 tokens/s
	}
	srv := servers(j.Close(at(7.5)))
	w := srv[len(srv)-1]
	if tpj := w.TokensPerJoule; !tpj.OK || math.Abs(tpj.V-2) > 1e-9 {
		t.Errorf("tokens_per_joule %v, want 2 (%+v)", tpj, w)
	}
}

// A server a reload removes is written for the windows that hold what was
// observed of it, the last one partial, then no more.
func TestJoinerSetServersWritesRemovedServersLastWindows(t *testing.T) {
	j := newJoiner(0)
	both := []Server{{Name: "llm", Engine: "vllm"}, {Name: "gone", Engine: "vllm"}}
	j.SetServers(both, 2500*time.Millisecond)
	for _, s := range steady(0, 15, 1, 10, 0) {
		j.AddServer("llm", reading(s))
		j.AddServer("gone", reading(s))
	}
	j.SetServers(both[:1], 2500*time.Millisecond) // at 14.5: the window [0, 10) not yet written
	for _, s := range steady(15, 31, 1, 10, 150) {
		j.AddServer("llm", reading(s))
	}
	var gone []ServerWindow
	for _, w := range servers(append(j.Flush(at(25)), j.Flush(at(35))...)) {
		if w.Server == "gone" {
			gone = append(gone, w)
		}
	}
	if len(gone) != 2 {
		t.Fatalf("%d windows of the removed server, want 2: %+v", len(gone), gone)
	}
	if gone[0].Tokens != Some[int64](100) || gone[0].Coverage != 1 {
		t.Errorf("its whole window: %+v", gone[0])
	}
	if gone[1].Tokens != Some[int64](40) || gone[1].Coverage >= 1 || gone[1].Coverage < 0.3 {
		t.Errorf("its last window, observed until the reload: tokens %v coverage %v", gone[1].Tokens, gone[1].Coverage)
	}
	j.SetServers(both, 2500*time.Millisecond) // back, with a new series
	if n := len(j.retired); n != 0 {
		t.Errorf("%d removed servers still kept after their last window", n)
	}
}

// TestCloseAppendReusesStorage closes the same inputs window by window,
// once with Close and once with CloseAppend into one buffer truncated
// after each call (as replay does), and wants the same windows: reused
// storage and recycled accumulators must carry nothing over.
func TestCloseAppendReusesStorage(t *testing.T) {
	feed := func(j *Joiner, sec int) {
		j.AddGPU(gpuSample(float64(sec), float64(10+sec%7*10), 300+float64(sec%5), int64(sec)*300_000))
		iv := sample.Unknown(at(float64(sec)-0.5), at(float64(sec)))
		iv.Tokens, iv.Running, iv.Observed = float64(100+sec%13), float64(sec%4), true
		if sec%17 == 0 {
			iv.Start = at(float64(sec) - 23) // reaches back over two windows
		}
		j.AddLog("llm", iv)
	}
	plain, reused := newJoiner(0), newJoiner(0)
	var want, got []Closed
	var buf []Closed
	fed := 0.0
	for sec := 1; sec <= 300; sec++ {
		fed += float64(100 + sec%13)
		feed(plain, sec)
		feed(reused, sec)
		if sec%7 == 0 {
			want = append(want, deepCopy(plain.Close(at(float64(sec-25))))...)
			buf = reused.CloseAppend(buf[:0], at(float64(sec-25)))
			got = append(got, deepCopy(buf)...)
		}
	}
	want = append(want, deepCopy(plain.Close(at(301)))...)
	got = append(got, deepCopy(reused.CloseAppend(buf[:0], at(301)))...)
	if len(want) < 25 {
		t.Fatalf("only %d windows closed", len(want))
	}
	// Both joiners recycle accumulators: the tokens they count must still
	// be the tokens fed, less what reached back into closed windows.
	var counted float64
	for _, w := range servers(got) {
		counted += float64(w.Tokens.V)
	}
	if want := fed - reused.LateTokens() - reused.BeforeTokens(); math.Abs(counted-want) > float64(len(got)) {
		t.Errorf("windows count %.0f tokens, want %.0f (fed %.0f, late %.0f, before the first window %.0f)",
			counted, want, fed, reused.LateTokens(), reused.BeforeTokens())
	}
	if !reflect.DeepEqual(got, want) {
		for i := range min(len(got), len(want)) {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("window %d differs:\n got %+v\nwant %+v", i, got[i], want[i])
			}
		}
		t.Fatalf("%d windows, want %d", len(got), len(want))
	}
}

func deepCopy(cs []Closed) []Closed {
	out := make([]Closed, len(cs))
	for i, c := range cs {
		c.GPUs, c.Servers = slices.Clone(c.GPUs), slices.Clone(c.Servers)
		out[i] = c
	}
	return out
}
