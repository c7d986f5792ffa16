package engine_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/collector/logline"
)

// Each engine's smallest metrics page and one of the lines its log prints.
var samples = map[string]struct{ page, line string }{
	"vllm": {"vllm:generation_tokens_total 5\n",
		"INFO 01-28 05:07:10 [loggers.py:271] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 500.5 tokens/s, Running: 7 reqs, Waiting: 2 reqs, GPU KV cache usage: 91.0%"},
	"sglang": {"sglang:num_running_reqs 1\n",
		"[2026-04-08 14:05:21 DP1 TP0] Decode batch, #running-req: 5, #token: 20800, full token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 2, "},
	"tgi": {"tgi_queue_size 0\n",
		`2024-12-10T21:50:03.478010Z  INFO generate_stream{total_time="2.5s" validation_time="12us" queue_time="3.1ms" inference_time="2s" time_per_token="20ms" seed="None"}: text_generation_router::server: router/src/server.rs:500: Success`},
	"llamacpp": {"llamacpp:requests_processing 1\n",
		"slot print_timing: id  0 | task 160 |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)"},
	"trtllm": {"trtllm_num_requests_running 1\n",
		"[TRT-LLM] [I] iter = 120, global_rank = 0, rank = 0, currank_total_requests = 8/8, host_step_time = 25.0ms, prev_device_step_time = 24 ms, timestamp = 2026-05-01 10:00:00, num_scheduled_requests: 8, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 8}"},
	"triton": {"nv_llm_output_token_len_sum 5\n",
		"[TRT-LLM] [I] iter = 120, global_rank = 0, rank = 0, currank_total_requests = 8/8, host_step_time = 25.0ms, prev_device_step_time = 24 ms, timestamp = 2026-05-01 10:00:00, num_scheduled_requests: 8, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 8}"},
	"nim": {"generation_tokens_total 5\n",
		"INFO 01-28 05:07:10 [loggers.py:271] Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 500.5 tokens/s, Running: 7 reqs, Waiting: 2 reqs, GPU KV cache usage: 91.0%"},
	"lmdeploy": {"lmdeploy:num_requests_running 1\n",
		"[2026-03-01 08:00:10 DP0] Avg thr (in/out): 10.0 / 250.5 tokens/s, Server (succeeded/failed/routed/waiting): 5 / 0 / 12 / 1, Engine (running/waiting): 12 / 1, KV cache: 30.0%, "},
	"ollama": {"",
		"slot print_timing: id  0 | task 160 |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)"},
}

// Every engine, by its name and each alias, resolves in the metrics path
// where the registry says it serves metrics, and in the log path where it
// says its log is read; where not, the path says why, and never that the
// engine is unknown (the two paths once kept lists of their own, and
// disagreed about ollama).
func TestEveryEngineResolvesInBothPaths(t *testing.T) {
	for _, e := range engine.All {
		smp, ok := samples[e.Name]
		if !ok {
			t.Errorf("%s: no sample page and line in this test", e.Name)
			continue
		}
		for _, name := range append([]string{e.Name}, e.Aliases...) {
			t.Run(name, func(t *testing.T) {
				d, err := collector.DialectFor(name)
				switch {
				case e.Metrics && err != nil:
					t.Errorf("metrics: %v", err)
				case e.Metrics:
					checkMetrics(t, e, d, smp.page)
				case !errors.Is(err, engine.ErrNoMetrics) || errors.Is(err, engine.ErrUnknown):
					t.Errorf("metrics: %v, want %v", err, engine.ErrNoMetrics)
				}
				p, err := logline.NewParser(name)
				switch {
				case e.Log != "" && err != nil:
					t.Errorf("log: %v", err)
				case e.Log != "":
					if _, ok := p.Parse([]byte(smp.line)); !ok {
						t.Errorf("log: %s's parser read nothing of %q", name, smp.line)
					}
				case !errors.Is(err, engine.ErrNoLog) || errors.Is(err, engine.ErrUnknown):
					t.Errorf("log: %v, want %v", err, engine.ErrNoLog)
				}
			})
		}
	}
}

// checkMetrics reads the engine's page with its dialect, and detects the
// same dialect from it.
func checkMetrics(t *testing.T, e engine.Engine, d *collector.Dialect, page string) {
	t.Helper()
	if d.Engine != e.Name {
		t.Errorf("metrics: dialect of %s", d.Engine)
	}
	if _, err := d.Parse(strings.NewReader(page)); err != nil {
		t.Errorf("metrics: %v", err)
	}
	p, err := collector.ParsePage(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := collector.Detect(p); err != nil || got != d {
		t.Errorf("metrics: page detected as %v (%v)", got, err)
	}
}

// An unknown name is unknown to both paths alike, and the error lists
// the names there are.
func TestUnknownEngineListsNames(t *testing.T) {
	_, errM := collector.DialectFor("vllm2")
	_, errL := logline.NewParser("vllm2")
	for _, err := range []error{errM, errL} {
		if !errors.Is(err, engine.ErrUnknown) {
			t.Fatalf("vllm2: %v, want %v", err, engine.ErrUnknown)
		}
		for _, n := range append(engine.Names(), engine.Auto) {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("%q does not name %s", err, n)
			}
		}
	}
	if errM.Error() != errL.Error() {
		t.Errorf("metrics and log paths disagree: %q, %q", errM, errL)
	}
}

func TestNamesAreUnique(t *testing.T) {
	seen := map[string]string{engine.Auto: "auto"}
	for _, e := range engine.All {
		for _, n := range append([]string{e.Name}, e.Aliases...) {
			if other, ok := seen[n]; ok {
				t.Errorf("%q names %s and %s", n, other, e.Name)
			}
			seen[n] = e.Name
		}
		if e.Log != "" && !slices.Contains(engine.Names(), e.Log) {
			t.Errorf("%s: log format %q is no engine's", e.Name, e.Log)
		}
		if (!e.Metrics || e.Log == "") && e.Instead == "" {
			t.Errorf("%s: no hint what to read instead", e.Name)
		}
	}
}

// Every engine whose page tpsmon reads is named on a page by its marks, and
// a relay stands for the engine's own prefix: detection is the registry's.
func TestMetricMarks(t *testing.T) {
	for _, e := range engine.All {
		if e.Metrics && len(e.MetricMarks) == 0 {
			t.Errorf("%s serves metrics but has no marks to be detected by", e.Name)
		}
		if len(e.MetricRelays) > 0 && len(e.MetricMarks) == 0 {
			t.Errorf("%s has relays but no prefix of its own for them to stand for", e.Name)
		}
		for _, r := range e.MetricRelays {
			if r == "" || slices.Contains(e.MetricMarks, r) {
				t.Errorf("%s: relay %q is empty or one of its own marks", e.Name, r)
			}
		}
	}
}

// Ollama relays llama-server's lines, and the refinement runs one way:
// a detected llamacpp becomes ollama, never the reverse; an engine does
// not relay itself.
func TestRelays(t *testing.T) {
	for _, c := range []struct {
		relayer, lines string
		want           bool
	}{
		{"ollama", "llamacpp", true},
		{"llamacpp", "ollama", false},
		{"llamacpp", "llamacpp", false},
		{"ollama", "vllm", false},
		{"nim", "vllm", true},
		{"no-such-engine", "llamacpp", false},
	} {
		if got := engine.Relays(c.relayer, c.lines); got != c.want {
			t.Errorf("Relays(%q, %q) = %v, want %v", c.relayer, c.lines, got, c.want)
		}
	}
}

// Refine is the one place the refinement is decided (the parser, its
// identity and the joiner all ask it): from nothing to what was seen, from
// relayed to relayer, never back, never sideways.
func TestRefine(t *testing.T) {
	for _, c := range []struct{ known, seen, want string }{
		{"", engine.LlamaCpp, engine.LlamaCpp},
		{"", "", ""},
		{engine.LlamaCpp, engine.Ollama, engine.Ollama},
		{engine.Ollama, engine.LlamaCpp, engine.Ollama},
		{engine.Ollama, engine.Ollama, engine.Ollama},
		{engine.VLLM, engine.NIM, engine.NIM},
		{engine.NIM, engine.VLLM, engine.NIM},
		{engine.VLLM, engine.Ollama, engine.VLLM},
		{engine.SGLang, engine.VLLM, engine.SGLang},
	} {
		if got := engine.Refine(c.known, c.seen); got != c.want {
			t.Errorf("Refine(%q, %q) = %q, want %q", c.known, c.seen, got, c.want)
		}
	}
}

// A syslog identifier names one engine, and finds it.
func TestSyslogIdentifiers(t *testing.T) {
	seen := map[string]string{}
	for _, e := range engine.All {
		for _, id := range e.Syslog {
			if other, dup := seen[id]; dup {
				t.Errorf("syslog identifier %q names both %s and %s", id, other, e.Name)
			}
			seen[id] = e.Name
			if got, ok := engine.BySyslog(id); !ok || got.Name != e.Name {
				t.Errorf("BySyslog(%q) = %q, %v; want %s", id, got.Name, ok, e.Name)
			}
		}
	}
	for _, id := range []string{"ollama", "llama-server"} {
		if _, ok := engine.BySyslog(id); !ok {
			t.Errorf("BySyslog(%q): not found", id)
		}
	}
	if _, ok := engine.BySyslog("systemd"); ok {
		t.Error("BySyslog(systemd) names an engine")
	}
}
