// Package engine is the one list of inference engines tpsmon reads: each
// engine's canonical name, the other spellings accepted for it, and which
// of its outputs (a Prometheus metrics page, a log format) tpsmon knows.
// Config validation, the scraper's dialects, the log parsers and replay
// all resolve engine names here.
package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Auto asks tpsmon to find the engine itself: from the first metrics page
// that names one, or from the log lines. It is no engine of the list.
const Auto = "auto"

// The engines' canonical names: code outside this package names an engine
// with these, never with its own string.
const (
	VLLM     = "vllm"
	SGLang   = "sglang"
	TGI      = "tgi"
	LlamaCpp = "llamacpp"
	TRTLLM   = "trtllm"
	Triton   = "triton"
	NIM      = "nim"
	LMDeploy = "lmdeploy"
	Ollama   = "ollama"
)

// Engine is one inference engine.
type Engine struct {
	// Name is canonical: the engine tag and the detected engine say it.
	Name string
	// Aliases are other spellings a config or --engine may give.
	Aliases []string
	// Metrics: tpsmon reads the engine's Prometheus page (collector has
	// its dialect).
	Metrics bool
	// Log is the log format its lines are read with: its own name, or
	// that of the engine whose lines it prints; "" when tpsmon reads no
	// log of it.
	Log string
	// Instead tells a user asking for what tpsmon does not read what to
	// read instead.
	Instead string
	// MetricMarks are metric name prefixes that name the engine on a
	// metrics page (auto): its own prefix first, the one its dialect's
	// series are named with.
	MetricMarks []string
	// MetricRelays are prefixes under which another process re-exposes
	// the engine's series: a page name R+rest is read as
	// MetricMarks[0]+rest (Ray Serve's metrics agent prefixes vLLM's
	// with ray_, and Ray 2.5x also turns its colon into _).
	MetricRelays []string
	// Syslog are the identifiers the engine's process logs under in a
	// syslog or journald prefix ("host ollama[373]: "): a line so
	// prefixed is the engine's, whatever format it prints.
	Syslog []string
}

// All lists the engines, in the order help texts name them.
var All = []Engine{
	{Name: VLLM, Metrics: true, Log: VLLM, MetricMarks: []string{"vllm:"}, MetricRelays: []string{"ray_vllm:", "ray_vllm_"}},
	// SMG's gRPC-worker sidecar re-exposes SGLang's series with the colon
	// turned into _.
	{Name: SGLang, Metrics: true, Log: SGLang, MetricMarks: []string{"sglang:"}, MetricRelays: []string{"sglang_"}},
	{Name: TGI, Aliases: []string{"text-generation-inference"}, Metrics: true, Log: TGI, MetricMarks: []string{"tgi_"}},
	{Name: LlamaCpp, Aliases: []string{"llama.cpp", "llama-server"}, Metrics: true, Log: LlamaCpp, MetricMarks: []string{"llamacpp:"},
		Syslog: []string{"llama-server"}},
	{Name: TRTLLM, Aliases: []string{"tensorrt-llm", "trtllm-serve"}, Metrics: true, Log: TRTLLM, MetricMarks: []string{"trtllm_", "trtllm:"}},
	// Triton's TensorRT-LLM backend prints TensorRT-LLM's iteration lines.
	{Name: Triton, Metrics: true, Log: TRTLLM, MetricMarks: []string{"nv_trt_llm_", "nv_llm_"}},
	// NIM's vLLM backend prints vLLM's stat line; its page has vLLM's
	// names without the prefix.
	{Name: NIM, Metrics: true, Log: VLLM, MetricMarks: []string{"generation_tokens_total", "num_requests_running"}},
	{Name: LMDeploy, Metrics: true, Log: LMDeploy, MetricMarks: []string{"lmdeploy:"}},
	// Ollama >= 0.30 relays llama-server's lines (see Relays), as its
	// embedded server did in 2024; it serves no metrics page.
	{Name: Ollama, Log: LlamaCpp, Instead: "read its log (log.journal_unit: ollama.service, or log.file)", Syslog: []string{"ollama"}},
}

// Relays tells whether engine relayer's log carries engine lines' lines
// as its own: relayer's log format is lines' (Ollama copies llama-server's
// output into its log; NIM and Triton print their backend's lines). Such
// lines, read as lines', are relayer's once the log names relayer: the
// detected engine refines from lines to relayer, never back.
func Relays(relayer, lines string) bool {
	e, ok := byName[relayer]
	return ok && e.Name != lines && e.Log == lines
}

// Refine is the engine a log is taken for once it has shown lines of
// engine seen, having been taken for known ("" while nothing has said):
// seen when nothing was known, or when seen relays known's lines (a log of
// llamacpp lines that then shows one of Ollama's own is Ollama's); known
// otherwise, so a detection never goes back from relayer to relayed.
func Refine(known, seen string) string {
	if known == "" || Relays(seen, known) {
		return seen
	}
	return known
}

// BySyslog finds the engine that logs under a syslog identifier.
func BySyslog(ident string) (Engine, bool) {
	e, ok := bySyslog[ident]
	return e, ok
}

var byName, bySyslog = func() (names, idents map[string]Engine) {
	names, idents = map[string]Engine{}, map[string]Engine{}
	for _, e := range All {
		names[e.Name] = e
		for _, id := range e.Syslog {
			idents[id] = e
		}
	}
	return names, idents
}()

// ErrUnknown marks an engine name that is neither an engine's name nor
// one of its aliases.
var ErrUnknown = errors.New("unknown engine")

// ErrNoMetrics marks an engine whose metrics page tpsmon does not read.
var ErrNoMetrics = errors.New("serves no Prometheus metrics tpsmon reads")

// ErrNoLog marks an engine whose log tpsmon does not read.
var ErrNoLog = errors.New("has no log format tpsmon reads")

// Lookup finds an engine by its name or an alias. Auto is not one: callers
// decide what it means to them first.
func Lookup(name string) (Engine, error) {
	for _, e := range All {
		if e.Name == name || slices.Contains(e.Aliases, name) {
			return e, nil
		}
	}
	return Engine{}, fmt.Errorf("%w %q (known: %s, %s)", ErrUnknown, name, Auto, strings.Join(Names(), ", "))
}

// Names returns the canonical names, in the order of All.
func Names() []string {
	out := make([]string, len(All))
	for i, e := range All {
		out[i] = e.Name
	}
	return out
}

// CheckMetrics returns an error wrapping ErrNoMetrics unless tpsmon reads
// the engine's metrics page.
func (e Engine) CheckMetrics() error {
	if e.Metrics {
		return nil
	}
	return fmt.Errorf("%s %w: %s", e.Name, ErrNoMetrics, e.Instead)
}

// CheckLog returns an error wrapping ErrNoLog unless tpsmon reads the
// engine's log.
func (e Engine) CheckLog() error {
	if e.Log != "" {
		return nil
	}
	return fmt.Errorf("%s %w: %s", e.Name, ErrNoLog, e.Instead)
}
