package window

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/gpu"
)

var t0 = time.Unix(1_700_000_000, 0) // a multiple of 10 s

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// scrape is one server reading: the generation counter and a running gauge.
type scrape struct {
	t       float64
	tokens  float64
	running float64
}

func sample(s scrape) collector.Sample {
	var smp collector.Sample
	smp.Time = at(s.t)
	smp.SetCounter(collector.GenerationTokens, s.tokens)
	smp.SetGauge(collector.Running, s.running)
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

func fields(p *write.Point) map[string]any {
	m := make(map[string]any)
	for _, f := range p.FieldList() {
		m[f.Key] = f.Value
	}
	return m
}

func tags(p *write.Point) map[string]string {
	m := make(map[string]string)
	for _, t := range p.TagList() {
		m[t.Key] = t.Value
	}
	return m
}

func newJoiner(start float64) *Joiner {
	return New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond,
		Host: "node-a", Start: at(start)}, []Server{{Name: "llm", Engine: "vllm", GPUs: []string{"0"}}})
}

// serverPoints feeds scrapes and returns the server point of every window
// closed by a flush at the given time.
func serverPoints(t *testing.T, j *Joiner, scrapes []scrape, flushAt float64) []*write.Point {
	t.Helper()
	for _, s := range scrapes {
		j.AddServer("llm", sample(s))
	}
	var out []*write.Point
	for _, p := range j.Flush(at(flushAt)) {
		if p.Name() == "tpsmon_server" {
			out = append(out, p)
		}
	}
	return out
}

type want struct {
	start    float64
	tokens   any // int64, or nil for absent
	tps      float64
	coverage float64
	state    string
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
				{0, int64(1000), 100, 1, "ok"},
				{10, int64(1000), 100, 1, "ok"},
				{20, int64(1000), 100, 1, "ok"},
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
				{0, int64(50), 50 / 1.5, 0.15, "ok"},
				// [10,20): the other half; 12.5..19.5 is a gap longer than MaxGap.
				{10, int64(50), 50 / 3.0, 0.3, "ok"},
			},
		},
		{
			name:    "missing scrapes: tokens kept, coverage lowered",
			scrapes: append(steady(0, 13, 1, 10, 0), steady(17, 31, 1, 10, 170)...),
			flushAt: 35,
			want: []want{
				{0, int64(100), 10, 1, "ok"},
				// 12..17 is a 5 s gap: its 50 tokens land at 17, inside the
				// window, but the rate is the 50 seen over the 5 s observed.
				{10, int64(100), 50 / 5.0, 0.5, "ok"},
				{20, int64(100), 10, 1, "ok"},
			},
		},
		{
			name: "counter reset mid-window counts the new value, never negative",
			scrapes: append(steady(0, 15, 1, 100, 90000),
				steady(15, 31, 1, 100, 0)...), // restarted at 15 from 0
			flushAt: 35,
			want: []want{
				{0, int64(1000), 100, 1, "ok"},
				// 10..14 gives 400 (and the edge at 10), then the reset drops
				// the 14..15 second: 0 is the new value, then 15..20 gives 500.
				{10, int64(900), 90, 1, "ok"},
				{20, int64(1000), 100, 1, "ok"},
			},
		},
		{
			name:    "server starts mid-window: partial coverage, rate over what was seen",
			scrapes: steady(14, 31, 1, 20, 0),
			flushAt: 35,
			want: []want{
				{0, nil, 0, 0, "down"},
				{10, int64(120), 20, 0.6, "ok"},
				{20, int64(200), 20, 1, "ok"},
			},
		},
		{
			name:    "no scrapes at all: down, nothing invented",
			flushAt: 25,
			want:    []want{{0, nil, 0, 0, "down"}, {10, nil, 0, 0, "down"}},
		},
		{
			name:    "idle server",
			scrapes: []scrape{{0, 7, 0}, {1, 7, 0}, {2, 7, 0}, {3, 7, 0}, {4, 7, 0}, {5, 7, 0}, {6, 7, 0}, {7, 7, 0}, {8, 7, 0}, {9, 7, 0}, {10, 7, 0}},
			flushAt: 15,
			want:    []want{{0, int64(0), 0, 1, "idle"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := serverPoints(t, newJoiner(tt.start), tt.scrapes, tt.flushAt)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d windows, want %d", len(got), len(tt.want))
			}
			for i, w := range tt.want {
				f := fields(got[i])
				if !got[i].Time().Equal(at(w.start)) {
					t.Errorf("window %d starts %v, want %v", i, got[i].Time(), at(w.start))
				}
				if f["tokens"] != w.tokens {
					t.Errorf("window %d tokens = %v, want %v", i, f["tokens"], w.tokens)
				}
				if w.tokens != nil {
					if tps, _ := f["system_tps"].(float64); math.Abs(tps-w.tps) > 1e-6 {
						t.Errorf("window %d system_tps = %v, want %v", i, tps, w.tps)
					}
				} else if _, ok := f["system_tps"]; ok {
					t.Errorf("window %d has system_tps without data", i)
				}
				if c := f["coverage"].(float64); math.Abs(c-w.coverage) > 1e-9 {
					t.Errorf("window %d coverage = %v, want %v", i, c, w.coverage)
				}
				if f["state"] != w.state {
					t.Errorf("window %d state = %v, want %v", i, f["state"], w.state)
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
	pts := serverPoints(t, j, scr, 45)
	var sum int64
	for _, p := range pts {
		if n, ok := fields(p)["tokens"].(int64); ok {
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
	serverPoints(t, j, steady(0, 16, 1, 10, 0), 15) // closes [0,10)
	if ok := j.AddServer("llm", sample(scrape{t: 9.9, tokens: 99})); ok {
		t.Error("a sample for a closed window was accepted")
	}
	if ok := j.AddGPU(gpu.Sample{Time: at(5), UUID: "GPU-x"}); ok {
		t.Error("a GPU sample for a closed window was accepted")
	}
	if j.Late() != 2 {
		t.Errorf("late = %d, want 2", j.Late())
	}
	// The open window is unaffected: still exactly 10 tokens/s.
	pts := serverPoints(t, j, steady(16, 21, 1, 10, 160), 25)
	if f := fields(pts[0]); f["tokens"] != int64(100) {
		t.Errorf("window after a late sample: tokens %v, want 100", f["tokens"])
	}
}

func TestJoinerGraceWaitsForLateScrape(t *testing.T) {
	j := newJoiner(0)
	serverPoints(t, j, steady(0, 10, 1, 10, 0), 14.9)
	if pts := j.Flush(at(14.9)); len(pts) != 0 {
		t.Fatalf("window closed before end+grace: %d points", len(pts))
	}
	// The scrape after the edge arrives within grace and brackets it.
	pts := serverPoints(t, j, []scrape{{t: 11, tokens: 110, running: 4}}, 15)
	if len(pts) != 1 || fields(pts[0])["tokens"] != int64(100) || fields(pts[0])["coverage"] != 1.0 {
		t.Fatalf("got %v", fields(pts[0]))
	}
}

func TestJoinerClosePartial(t *testing.T) {
	j := newJoiner(0)
	for _, s := range steady(0, 14, 1, 10, 0) {
		j.AddServer("llm", sample(s))
	}
	var srv []*write.Point
	for _, p := range j.Close(at(13.5)) {
		if p.Name() == "tpsmon_server" {
			srv = append(srv, p)
		}
	}
	if len(srv) != 2 {
		t.Fatalf("Close gave %d server windows, want 2", len(srv))
	}
	f := fields(srv[1])
	if f["tokens"] != int64(30) || math.Abs(f["coverage"].(float64)-0.3) > 1e-9 {
		t.Errorf("partial window: tokens %v coverage %v, want 30 and 0.3", f["tokens"], f["coverage"])
	}
}

func gpuSample(sec float64, util, power float64, energyMJ int64) gpu.Sample {
	return gpu.Sample{Time: at(sec), Index: 0, UUID: "GPU-0", Name: "H100",
		UtilPct: util, PowerW: power, EnergyMJ: energyMJ, MemUsedBytes: 70 << 30, MemTotalBytes: 80 << 30,
		Has: gpu.FieldUtil | gpu.FieldPower | gpu.FieldEnergy | gpu.FieldMemory}
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
		j.AddServer("llm", sample(scrape{t: float64(i), tokens: float64(i) * 1000, running: 8}))
	}
	j.AddGPU(gpu.Sample{Time: at(3), Index: 1, UUID: "GPU-1", Name: "H100", Err: errors.New("gpu 1: GPU is lost")})
	pts := j.Flush(at(15))
	if len(pts) != 3 {
		t.Fatalf("got %d points, want 2 GPUs + 1 server", len(pts))
	}
	g0, g1, srv := fields(pts[0]), fields(pts[1]), fields(pts[2])
	if tags(pts[0])["server"] != "llm" || tags(pts[1])["server"] != "" {
		t.Errorf("gpu server tags %q %q", tags(pts[0])["server"], tags(pts[1])["server"])
	}
	if g0["util"] != 60.0 || g0["util_max"] != 70.0 || g0["energy_j"] != 5000.0 || g0["samples"] != int64(10) {
		t.Errorf("gpu 0 fields %v", g0)
	}
	if g1["error"] != "gpu 1: GPU is lost" || g1["samples"] != int64(0) || g1["coverage"] != 0.0 {
		t.Errorf("lost gpu fields %v", g1)
	}
	if _, ok := g1["util"]; ok {
		t.Error("lost GPU reports a utilization")
	}
	if tags(pts[2])["gpus"] != "0" {
		t.Errorf("server gpus tag %q", tags(pts[2])["gpus"])
	}
	if srv["tokens_per_joule"] != 2.0 || srv["tps_per_gpu"] != 1000.0 || srv["power_w"] != 480.0 {
		t.Errorf("server join fields %v", srv)
	}
	if srv["mem_used_bytes"] != int64(70<<30) || srv["gpu_util"] != 60.0 {
		t.Errorf("server gpu fields %v", srv)
	}
}

func TestJoinerEnergyFallsBackToPower(t *testing.T) {
	j := newJoiner(0)
	for i := 0; i <= 11; i++ {
		s := gpuSample(float64(i), 10, 300, 0)
		s.Has &^= gpu.FieldEnergy
		j.AddGPU(s)
	}
	f := fields(j.Flush(at(15))[0])
	if f["energy_j"] != 3000.0 {
		t.Errorf("energy from power = %v, want 3000", f["energy_j"])
	}
}

func TestJoinerSkipsAheadAfterClockJump(t *testing.T) {
	j := newJoiner(0)
	pts := j.Flush(at(1e6))
	if n := len(pts); n != maxCatchUp {
		t.Errorf("closed %d windows after a jump, want at most %d", n, maxCatchUp)
	}
	if j.Skipped() == 0 {
		t.Error("skipped windows not counted")
	}
}

func TestVerdict(t *testing.T) {
	base := verdictInput{tokens: 100, running: 4, waiting: 0, kv: 0.5, util: 75}
	tests := []struct {
		name string
		mod  func(*verdictInput)
		want string
	}{
		{"down", func(v *verdictInput) { v.down = true }, "down"},
		{"idle", func(v *verdictInput) { v.tokens, v.running = 0, 0 }, "idle"},
		{"kv bound", func(v *verdictInput) { v.waiting, v.kv = 3, 0.95 }, "kv_bound"},
		{"kv bound by preemption", func(v *verdictInput) { v.preempted, v.kv = true, 0.92 }, "kv_bound"},
		{"queue bound", func(v *verdictInput) { v.waiting, v.util = 5, 45 }, "queue_bound"},
		{"underutilized", func(v *verdictInput) { v.util = 20 }, "underutilized"},
		{"saturated", func(v *verdictInput) { v.waiting, v.util = 5, 97 }, "saturated"},
		{"ok", func(*verdictInput) {}, "ok"},
		{"no gpu data never guesses", func(v *verdictInput) { v.waiting, v.util = 5, -1 }, "ok"},
	}
	for _, tt := range tests {
		in := base
		tt.mod(&in)
		if got := verdict(in, DefaultThresholds); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestJoinerSetServersKeepsSeries(t *testing.T) {
	j := newJoiner(0)
	for _, s := range steady(0, 14, 1, 10, 0) {
		j.AddServer("llm", sample(s))
	}
	j.SetServers([]Server{{Name: "llm", Engine: "vllm"}, {Name: "new", Engine: "vllm"}}, 2500*time.Millisecond)
	for _, s := range steady(14, 21, 1, 10, 140) {
		j.AddServer("llm", sample(s))
	}
	var srv []map[string]any
	for _, p := range j.Flush(at(25)) {
		if p.Name() == "tpsmon_server" && tags(p)["server"] == "llm" {
			srv = append(srv, fields(p))
		}
	}
	if len(srv) != 2 || srv[1]["tokens"] != int64(100) || srv[1]["coverage"] != 1.0 {
		t.Errorf("series broken by the reload: %v", srv)
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
			s.UtilSamples = append(s.UtilSamples, gpu.UtilSample{Time: at(float64(i) - 1 + float64(k+1)/6), Pct: pct})
		}
		s.SMActive, s.SMOccupancy, s.TensorActive, s.DRAMActive = 35, 20, 15, 50
		s.Has |= gpu.FieldGPM
		j.AddGPU(s)
		j.AddServer("llm", sample(scrape{t: float64(i), tokens: float64(i) * 100, running: 4}))
	}
	pts := j.Flush(at(15))
	g, srv := fields(pts[0]), fields(pts[1])
	if u := g["util"].(float64); math.Abs(u-30) > 1e-9 || g["util_max"] != 80.0 {
		t.Errorf("util %v max %v, want the driver samples' 30 and 80", g["util"], g["util_max"])
	}
	if g["sm_active"] != 35.0 || g["tensor_active"] != 15.0 || g["dram_active"] != 50.0 || g["energy_source"] != "counter" {
		t.Errorf("gpu fields %v", g)
	}
	// SM activity (35%) drives the verdict: tokens flow, nothing waits,
	// the GPU is mostly idle inside.
	if srv["sm_active"] != 35.0 || srv["state"] != "underutilized" {
		t.Errorf("server sm_active %v state %v", srv["sm_active"], srv["state"])
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
	f := fields(j.Flush(at(15))[0])
	// 4 s before the reset and 5 s after; the second of the reset counts
	// what the new counter says (0).
	if f["energy_j"] != 1800.0 {
		t.Errorf("energy across a reset %v, want 1800", f["energy_j"])
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
			[]Server{{Name: "llm", Engine: c.configured, Source: "log"}})
		for _, n := range c.names {
			j.NameEngine("llm", n[0])
			j.NameModel("llm", n[1])
		}
		j.Watch("llm", at(1))
		pts := j.Close(at(5))
		tg := tags(pts[len(pts)-1])
		if tg["engine"] != c.wantEngine || tg["model"] != c.wantModel {
			t.Errorf("%s: engine %q model %q, want %q and %q", c.name, tg["engine"], tg["model"], c.wantEngine, c.wantModel)
		}
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
		j.AddServer("llm", sample(scrape{t: float64(i), tokens: float64(i) * 1000, running: 8})) // 1000 tokens/s
	}
	pts := j.Close(at(7.5))
	srv := fields(pts[len(pts)-1])
	if tpj, ok := srv["tokens_per_joule"].(float64); !ok || math.Abs(tpj-2) > 1e-9 {
		t.Errorf("tokens_per_joule %v, want 2 (fields %v)", srv["tokens_per_joule"], srv)
	}
}
