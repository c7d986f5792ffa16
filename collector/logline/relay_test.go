package logline

import (
	"testing"
)

// The real JSON print_timings line of ollama/ollama issue #3949 (2024-04),
// and prefixes that relays put before lines (journald's from ollama issue
// #1365, docker logs -t, a quote): the record is the bare line's, behind
// any of them.
func TestLlamaJSONBehindPrefix(t *testing.T) {
	const line = `{"function":"print_timings","level":"INFO","line":283,"msg":"generation eval time =   31807.07 ms /    64 runs   (  496.99 ms per token,     2.01 tokens per second)","n_decoded":64,"n_tokens_second":2.0121314549373572,"slot_id":0,"t_token":496.985421875,"t_token_generation":31807.067,"task_id":850,"tid":"23180484790144","timestamp":1714146690}`
	const want = `request tokens=64 dur=31.807067s user=2.01213 key="slot 0 task 850" t=2024-04-26T15:51:30Z`
	for _, prefix := range []string{"", "Dec 03 14:58:50 osm-server ollama[20658]: ", "2026-05-12T08:01:39.331095044Z ", "> ", "ollama   | "} {
		p, err := NewParser("auto")
		if err != nil {
			t.Fatal(err)
		}
		r, ok := p.Parse([]byte(prefix + line))
		if !ok {
			t.Errorf("%q: no record", prefix)
			continue
		}
		if got := format(r); got != want {
			t.Errorf("%q:\n got %s\nwant %s", prefix, got, want)
		}
	}
}

// A syslog or journald prefix's identifier names the engine where the
// registry lists it: Ollama relaying llama-server's lines is Ollama, a
// journald-run llama-server is llama.cpp, and other identifiers name
// nothing.
func TestSyslogIdentifierNamesEngine(t *testing.T) {
	// The line of ollama/ollama issue #18090 (2026-08), behind the
	// prefixes of its own journal and of others.
	const text = "slot print_timing: id  0 | task 4121 | n_gen =    215, tg =  18.96 t/s, tg_3s =  19.26 t/s"
	for _, c := range []struct {
		prefix, engine string
	}{
		{"Aug 28 16:17:16 spark-08 ollama[2924030]: ", "ollama"},
		{"2026-10-01T05:26:29.095747+00:00 gpu-box-7 ollama[394624]: ", "ollama"},
		{"Feb 16 03:40:19 llama-local llama-server[3601]: ", "llamacpp"},
		{"May 21 07:23:01 helium-cuda llm-server-start[59332]: ", "llamacpp"}, // a wrapper: the lines say llama.cpp
		{"", "llamacpp"},
	} {
		p, err := NewParser("auto")
		if err != nil {
			t.Fatal(err)
		}
		r, ok := p.Parse([]byte(c.prefix + text))
		if !ok {
			t.Errorf("%q: no record", c.prefix)
			continue
		}
		if r.Engine != c.engine || p.Identity().Engine != c.engine {
			t.Errorf("%q: record engine %q, identity %q; want %q", c.prefix, r.Engine, p.Identity().Engine, c.engine)
		}
	}
}

// Ollama relays llama-server's start-up banner too: behind Ollama's
// journald prefix it makes the log Ollama's, not llama.cpp's, and the
// relayed lines after it are Ollama's (the registry's Relays).
func TestSyslogOllamaOverLlamaBanner(t *testing.T) {
	p, err := NewParser("auto")
	if err != nil {
		t.Fatal(err)
	}
	p.Parse([]byte("Aug 28 16:17:13 spark-08 ollama[2924030]: main: server is listening on http://0.0.0.0:9999 - starting the main loop"))
	if got := p.Identity().Engine; got != "ollama" {
		t.Fatalf("after the relayed banner: engine %q, want ollama", got)
	}
	r, ok := p.Parse([]byte("Aug 28 16:17:19 spark-08 ollama[2924030]: slot print_timing: id  0 | task 1549 | n_gen =    100, tg =  19.02 t/s, tg_3s =  19.22 t/s"))
	if !ok || r.Engine != "ollama" || p.Identity().Engine != "ollama" {
		t.Errorf("relayed line: ok %v, record engine %q, identity %q; want ollama", ok, r.Engine, p.Identity().Engine)
	}
}

// A log whose first line has no syslog prefix has none: a later line
// that looks like one names no engine (a busy llama-server log pays one
// scan, not one a line).
func TestSyslogFirstLineDecides(t *testing.T) {
	p, err := NewParser("auto")
	if err != nil {
		t.Fatal(err)
	}
	p.Parse([]byte("main: server is listening on http://0.0.0.0:9999 - starting the main loop"))
	r, ok := p.Parse([]byte("Aug 28 16:17:19 spark-08 ollama[2924030]: slot print_timing: id  0 | task 1549 | n_gen =    100, tg =  19.02 t/s, tg_3s =  19.22 t/s"))
	if !ok || r.Engine != "llamacpp" {
		t.Errorf("ok %v, engine %q; want llamacpp", ok, r.Engine)
	}
}

func TestSyslogIdent(t *testing.T) {
	for _, c := range []struct{ line, ident, body string }{
		{"Jan 28 05:07:10 host ollama[373]: [GIN] x", "ollama", "[GIN] x"},
		{"Aug 28 16:17:16 spark-08 ollama[2924030]: slot", "ollama", "slot"},
		{"[42027] 1.35.716.244 I slot print_timing: id  0", "", ""},
		{"slot print_timing: id  0 | task 0 | n_decoded = 1", "", ""},
		{"x[]: y", "", ""},
		{"[1]: y", "", ""},
	} {
		ident, at := syslogIdent([]byte(c.line))
		body := ""
		if at > 0 {
			body = c.line[at:]
		}
		if string(ident) != c.ident || body != c.body {
			t.Errorf("syslogIdent(%q) = %q, %q; want %q, %q", c.line, ident, body, c.ident, c.body)
		}
	}
}
