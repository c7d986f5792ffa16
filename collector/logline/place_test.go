package logline

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestElapsedStamp(t *testing.T) {
	cases := []struct {
		line string
		want time.Duration
		ok   bool
	}{
		{"0.36.157.459 I slot launch_slot_: id  3", 36*time.Second + 157459*time.Microsecond, true},
		{"12.05.000.001 W srv stop: cancel task", 12*time.Minute + 5*time.Second + time.Microsecond, true},
		{"2026-11-30T08:42:20.567403Z 2.38.109.366 I slot", 2*time.Minute + 38*time.Second + 109366*time.Microsecond, true},
		{"0.61.000.000 I bad seconds", 0, false},
		{"1.2.3.4 I not a stamp", 0, false},
		{"slot print_timing: id  3 | task 126 |", 0, false},
	}
	for _, c := range cases {
		d, ok := elapsed([]byte(c.line))
		if ok != c.ok || d != c.want {
			t.Errorf("%q: %v %v, want %v %v", c.line, d, ok, c.want, c.ok)
		}
	}
}

func TestLiveTimeAnchorsStampsToTheEarliestRead(t *testing.T) {
	p, _ := NewParser("llamacpp")
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	steps := []struct {
		line       string
		read, want time.Time
	}{
		// Read 300 ms late: the anchor is late until a timelier line.
		{"0.10.000.000 I srv", t0.Add(10300 * time.Millisecond), t0.Add(10300 * time.Millisecond)},
		{"0.11.000.000 I srv", t0.Add(11010 * time.Millisecond), t0.Add(11010 * time.Millisecond)},
		// Read late again: written at 12 s after the start found so far.
		{"0.12.000.000 I srv", t0.Add(12500 * time.Millisecond), t0.Add(12010 * time.Millisecond)},
		{"an unstamped line", t0.Add(13 * time.Second), t0.Add(13 * time.Second)},
		// The server restarted: its stamps begin again.
		{"0.00.500.000 I srv", t0.Add(60 * time.Second), t0.Add(60 * time.Second)},
		{"0.01.500.000 I srv", t0.Add(61200 * time.Millisecond), t0.Add(61 * time.Second)},
	}
	for i, s := range steps {
		if got := p.LiveTime([]byte(s.line), s.read); !got.Equal(s.want) {
			t.Errorf("step %d %q: %v, want %v", i, s.line, got.Sub(t0), s.want.Sub(t0))
		}
	}
}

func TestIdentity(t *testing.T) {
	cases := []struct {
		name, log string
		want      Identity
	}{
		{"llama-server start-up", "0.00.004.807 I srv    load_model: loading model '/models/tiny.gguf'\n" +
			"0.00.152.434 I srv  llama_server: listening on http://127.0.0.1:18080", Identity{Engine: "llamacpp", Model: "tiny"}},
		{"ollama relaying llama-server", "srv  llama_server: model loaded\n" +
			`time=2026-11-30T09:14:10.759Z level=WARN source=images.go:807 msg="no template" model=registry.ollama.ai/library/randnb:latest`,
			Identity{Engine: "ollama", Model: "randnb:latest"}},
		{"ollama access line only", `[GIN] 2026/11/30 - 09:14:11 | 200 |  641.302823ms |       127.0.0.1 | POST     "/api/generate"`,
			Identity{Engine: "ollama"}},
		{"vllm stat line", "INFO 05-12 08:01:39 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%",
			Identity{Engine: "vllm"}},
		// The lines that state a version (llama.cpp's build line, before
		// its others; vLLM's and Ollama's start-up lines).
		{"llama-server build line", "build: 4567 (abc1234) with cc (GCC) 12.2.0 for x86_64-linux-gnu\n" +
			"0.00.004.807 I srv    load_model: loading model '/models/tiny.gguf'", Identity{Engine: "llamacpp", Model: "tiny", Version: "b4567-abc1234"}},
		{"vllm api server version", "INFO 10-30 21:56:25 api_server.py:528] vLLM API server version 0.6.3.post1\n" +
			"INFO 10-30 21:56:40 metrics.py:345] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.",
			Identity{Engine: "vllm", Version: "0.6.3.post1"}},
		{"ollama listening", `time=2026-11-30T09:13:46.228Z level=INFO source=routes.go:2001 msg="Listening on 127.0.0.1:11434 (version 0.34.1)"`,
			Identity{Engine: "ollama", Version: "0.34.1"}},
		{"no version in a build word", "0.00.004.807 I srv    load_model: loading model '/models/tiny.gguf'\n0.01.000.000 I srv  llama_server: build: none", Identity{Engine: "llamacpp", Model: "tiny"}},
	}
	for _, c := range cases {
		p, _ := NewParser("auto")
		for _, l := range strings.Split(c.log, "\n") {
			p.Parse([]byte(l))
		}
		if p.Identity() != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, p.Identity(), c.want)
		}
	}
}

func TestPlacer(t *testing.T) {
	const timing = "slot print_timing: id  3 | task %s |        eval time =     620.63 ms /   128 tokens (    4.89 ms per token,   204.63 tokens per second)"
	eval := func(task string) string { return strings.Replace(timing, "%s", task, 1) }
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339Nano, "2026-11-30T"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	cases := []struct {
		name      string
		lines     []string
		want      []time.Time
		far, gins int
	}{
		{"GIN end matched to the start line to the millisecond", []string{
			"time=2026-11-30T09:14:10.759Z level=WARN source=images.go:807 msg=start",
			eval("0"),
			`[GIN] 2026/11/30 - 09:14:11 | 200 |  641.302823ms |       127.0.0.1 | POST     "/api/generate"`,
		}, []time.Time{at("09:14:11.400302823")}, 0, 1},
		{"GIN end without a start line: mid-second", []string{
			"time=2026-11-30T09:13:46.754Z level=INFO source=server.go:100 msg=loaded",
			eval("0"),
			`[GIN] 2026/11/30 - 09:14:11 | 200 |  641.302823ms |       127.0.0.1 | POST     "/api/chat"`,
		}, []time.Time{at("09:14:11.5")}, 0, 1},
		{"a GET between timing and its request's end is no end", []string{
			"time=2026-11-30T09:14:10.759Z level=WARN source=images.go:807 msg=start",
			eval("0"),
			`[GIN] 2026/11/30 - 09:14:11 | 200 |       67.06µs |       127.0.0.1 | GET      "/api/version"`,
			`[GIN] 2026/11/30 - 09:14:11 | 200 |  641.302823ms |       127.0.0.1 | POST     "/api/generate"`,
		}, []time.Time{at("09:14:11.400302823")}, 0, 1},
		{"no GIN: spread between the stamps around, near", []string{
			"2026-11-30T09:00:00Z other", eval("1"), eval("2"), eval("3"), "2026-11-30T09:00:01Z other",
		}, []time.Time{at("09:00:00.25"), at("09:00:00.5"), at("09:00:00.75")}, 0, 0},
		{"no GIN: stamps far apart", []string{
			"2026-11-30T09:00:00Z other", eval("1"), "2026-11-30T09:01:00Z other",
		}, []time.Time{at("09:00:30")}, 1, 0},
		{"nothing after: the last stamp, far", []string{
			"2026-11-30T09:00:00Z other", eval("1"),
		}, []time.Time{at("09:00:00")}, 1, 0},
	}
	for _, c := range cases {
		p, _ := NewParser("auto")
		p.Timestamps = true
		pl := &Placer{P: p}
		for _, l := range c.lines {
			pl.Line([]byte(l))
		}
		got := pl.Close()
		// Handed over as placed, the records come in the same order.
		p2, _ := NewParser("auto")
		p2.Timestamps = true
		var emitted []Placed
		pl2 := &Placer{P: p2, Emit: func(pr Placed) { emitted = append(emitted, pr) }}
		for _, l := range c.lines {
			pl2.Line([]byte(l))
		}
		if rest := pl2.Close(); len(rest) != 0 || !reflect.DeepEqual(emitted, got) {
			t.Errorf("%s: emitted %+v (and %d at Close), Close alone returns %+v", c.name, emitted, len(rest), got)
		}
		if len(got) != len(c.want) || pl.Far != c.far || pl.ByGIN != c.gins {
			t.Errorf("%s: %d placed, %d far, %d by GIN; want %d, %d, %d", c.name, len(got), pl.Far, pl.ByGIN, len(c.want), c.far, c.gins)
			continue
		}
		for i := range got {
			if !got[i].Time.Equal(c.want[i]) {
				t.Errorf("%s: line %d at %v, want %v", c.name, i, got[i].Time, c.want[i])
			}
		}
	}
}
