package logline

import (
	"bytes"
	"path"
	"strings"

	"github.com/tpsmon/tpsmon/collector/engine"
)

// Identity is what a log says of the server writing it: its engine, the
// model it serves and the engine's version. Empty while no line has said.
type Identity struct {
	Engine, Model string
	// Version is the engine's own: Ollama's "Listening on … (version
	// 0.34.1)", llama.cpp's start-up "build: 4567 (abc1234) with …" as
	// b4567-abc1234 (the form of its /props build_info), vLLM's "vLLM API
	// server version 0.6.3". A later start-up line replaces it.
	Version string
}

var (
	ollamaSlog  = []byte(" level=")
	ollamaGIN   = "[GIN] " // found by its G
	ollamaModel = []byte(" model=")
	// llama-server's start-up lines.
	llamaMarks = [][]byte{[]byte("llama_server: "), []byte("srv    load_model: "), []byte("main: server is listening"),
		[]byte("slot launch_slot_: "), []byte("common_params_print_info"), []byte("llama_model_loader: ")}
	llamaLoading = "load_model: loading model '" // found by its quote
	// Lines that state the engine's version.
	ollamaListening = []byte(`msg="Listening on `)
	ollamaVersion   = []byte("(version ")
	llamaBuild      = []byte("build: ")
	vllmVersion     = []byte("vLLM API server version ")
)

// Identity returns the engine and model the lines so far named.
func (p *Parser) Identity() Identity { return p.id }

// Identify reads a line only for what it says of the server (a line
// written before reading began), without counting anything.
func (p *Parser) Identify(line []byte) bool {
	if p.identifying() {
		return p.identify(line)
	}
	return false
}

// identifying tells whether lines may still say more of the server: while
// no engine is known, and in a llama-server log, which names its model
// and may turn out to be Ollama's (identify reads both's lines). Any other
// engine's log is not looked at again: every line of a busy log comes
// through here.
func (p *Parser) identifying() bool {
	return p.id.Engine == "" || p.id.Engine == engine.LlamaCpp || p.id.Engine == engine.Ollama
}

// identify looks for lines that name the engine or the model: start-up
// banners and Ollama's own lines (which make relayed llama-server lines
// Ollama's). It reports whether the identity changed.
func (p *Parser) identify(line []byte) bool {
	before := p.id
	body := line
	if !p.syslogNone {
		// A journald or syslog prefix names the process that wrote the
		// line (the registry's Syslog identifiers). Such a log prefixes
		// every line: one whose first line has none is never looked at
		// again (a busy llama-server log pays one scan).
		ident, at := syslogIdent(line)
		switch {
		case at > 0:
			p.syslogBody, body = true, line[at:]
			if e, ok := engine.BySyslog(string(ident)); ok && !p.syslogNamed {
				p.syslogNamed = true
				p.id.Engine = engine.Refine(p.id.Engine, e.Name)
			}
		case !p.syslogBody && len(line) > 0:
			p.syslogNone = true
		}
	}
	switch {
	case bytes.HasPrefix(body, []byte("time=")) && bytes.Contains(body, ollamaSlog):
		line = body
		p.id.Engine = engine.Refine(p.id.Engine, engine.Ollama)
		if i := bytes.Index(line, ollamaModel); i >= 0 {
			if m := ollamaModelName(line[i+len(ollamaModel):]); m != "" {
				p.id.Model = m
			}
		}
		if v := ollamaVersionOf(line); v != "" {
			p.id.Version = v
		}
	case indexAnchored(line, ollamaGIN, 1) >= 0:
		p.id.Engine = engine.Refine(p.id.Engine, engine.Ollama)
	case p.id.Engine == "" && bytes.Contains(line, vllmVersion):
		p.id.Engine = engine.VLLM
		p.id.Version = versionWord(line[bytes.Index(line, vllmVersion)+len(vllmVersion):])
	case p.id.Engine == "" || p.id.Engine == engine.LlamaCpp:
		// Once the engine is known (its first line), only the model and
		// the version are looked for: every line of a busy log comes here.
		// The build line comes before any other llama-server line.
		if v := llamaBuildOf(line); v != "" {
			p.id.Version = v
		}
		if p.id.Engine == "" && hasLlamaMark(line) {
			p.id.Engine = engine.LlamaCpp
		}
		if p.id.Engine != engine.LlamaCpp {
			break
		}
		if i := indexAnchored(line, llamaLoading, len(llamaLoading)-1); i >= 0 {
			rest := line[i+len(llamaLoading):]
			if j := bytes.IndexByte(rest, '\''); j > 0 {
				p.id.Model = strings.TrimSuffix(path.Base(string(rest[:j])), ".gguf")
			}
		}
	}
	return p.id != before
}

// syslogHead bounds where a syslog prefix's identifier may end: after a
// stamp and a host name.
const syslogHead = 160

// syslogIdent reads the identifier of a syslog or journald prefix
// ("Jan 28 05:07:10 host ollama[373]: ...") and where the text after it
// starts (0: no such prefix), from the line's first bytes only.
func syslogIdent(line []byte) (ident []byte, body int) {
	head := line[:min(len(line), syslogHead)]
	k := bytes.Index(head, []byte("]: "))
	if k <= 0 {
		return nil, 0
	}
	j := k
	for j > 0 && line[j-1] >= '0' && line[j-1] <= '9' {
		j--
	}
	if j == k || j < 2 || line[j-1] != '[' {
		return nil, 0
	}
	end := j - 1
	start := bytes.LastIndexByte(line[:end], ' ') + 1
	if start == end {
		return nil, 0
	}
	return line[start:end], k + len("]: ")
}

// versionWord is the version at the start of b: up to a space, quote,
// parenthesis or the end, "" when that is not one (no digit, or absurd).
func versionWord(b []byte) string {
	end := bytes.IndexAny(b, " \t\")'\"")
	if end < 0 {
		end = len(b)
	}
	v := b[:end]
	if len(v) == 0 || len(v) > 64 || !bytes.ContainsAny(v, "0123456789") {
		return ""
	}
	return string(v)
}

// ollamaVersionOf reads Ollama's `msg="Listening on 127.0.0.1:11434
// (version 0.34.1)"`, "" on any other line.
func ollamaVersionOf(line []byte) string {
	i := bytes.Index(line, ollamaListening)
	if i < 0 {
		return ""
	}
	j := bytes.Index(line[i:], ollamaVersion)
	if j < 0 {
		return ""
	}
	return versionWord(line[i+j+len(ollamaVersion):])
}

// llamaBuildOf reads llama.cpp's start-up line "build: 4567 (abc1234)
// with cc … for x86_64-linux-gnu" as b4567-abc1234, "" on any other line.
func llamaBuildOf(line []byte) string {
	i := bytes.Index(line, llamaBuild)
	if i < 0 {
		return ""
	}
	rest := line[i+len(llamaBuild):]
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 9 || !bytes.HasPrefix(rest[n:], []byte(" (")) {
		return ""
	}
	c := rest[n+2:]
	k := bytes.IndexByte(c, ')')
	if k <= 0 || k > 40 || bytes.IndexFunc(c[:k], func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) }) >= 0 {
		return ""
	}
	return "b" + string(rest[:n]) + "-" + string(c[:k])
}

func hasLlamaMark(line []byte) bool {
	for _, m := range llamaMarks {
		if bytes.Contains(line, m) {
			return true
		}
	}
	return false
}

// ollamaModelName reads a model= value: a name such as
// registry.ollama.ai/library/qwen3:8b, shown as qwen3:8b; paths of blobs
// are not names.
func ollamaModelName(v []byte) string {
	end := bytes.IndexAny(v, " \t")
	if end < 0 {
		end = len(v)
	}
	s := strings.Trim(string(v[:end]), `"`)
	if s == "" || strings.HasPrefix(s, "/") || strings.Contains(s, "sha256-") {
		return ""
	}
	return strings.TrimPrefix(s, "registry.ollama.ai/library/")
}
