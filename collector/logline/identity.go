package logline

import (
	"bytes"
	"path"
	"strings"
)

// Identity is what a log says of the server writing it: its engine and
// the model it serves. Empty while no line has said.
type Identity struct {
	Engine, Model string
}

var (
	ollamaSlog  = []byte(" level=")
	ollamaGIN   = "[GIN] " // found by its G
	ollamaModel = []byte(" model=")
	// llama-server's start-up lines.
	llamaMarks = [][]byte{[]byte("llama_server: "), []byte("srv    load_model: "), []byte("main: server is listening"),
		[]byte("slot launch_slot_: "), []byte("common_params_print_info"), []byte("llama_model_loader: ")}
	llamaLoading = "load_model: loading model '" // found by its quote
)

// Identity returns the engine and model the lines so far named.
func (p *Parser) Identity() Identity { return p.id }

// Identify reads a line only for what it says of the server (a line
// written before reading began), without counting anything.
func (p *Parser) Identify(line []byte) bool {
	if p.id.Engine == "" || p.id.Engine == "llamacpp" || p.id.Engine == "ollama" {
		return p.identify(line)
	}
	return false
}

// identify looks for lines that name the engine or the model: start-up
// banners and Ollama's own lines (which make relayed llama-server lines
// Ollama's). It reports whether the identity changed.
func (p *Parser) identify(line []byte) bool {
	before := p.id
	switch {
	case bytes.HasPrefix(line, []byte("time=")) && bytes.Contains(line, ollamaSlog):
		p.id.Engine = "ollama"
		if i := bytes.Index(line, ollamaModel); i >= 0 {
			if m := ollamaModelName(line[i+len(ollamaModel):]); m != "" {
				p.id.Model = m
			}
		}
	case indexAnchored(line, ollamaGIN, 1) >= 0:
		p.id.Engine = "ollama"
	case p.id.Engine == "" || p.id.Engine == "llamacpp":
		// Once the engine is known (its first line), only the model is
		// looked for: every line of a busy log comes here.
		if p.id.Engine == "" && hasLlamaMark(line) {
			p.id.Engine = "llamacpp"
		}
		if p.id.Engine != "llamacpp" {
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
