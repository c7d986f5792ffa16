// Package logline parses the throughput lines that inference servers write
// to their logs, for servers that are read from logs rather than (or as
// well as) from their metrics: vLLM V0/V1, SGLang, llama.cpp (and Ollama,
// which relays llama-server's lines), TGI, LMDeploy and TensorRT-LLM.
//
// A line is matched wherever its pattern sits, after ANSI colour codes are
// stripped, so docker, journald and compose prefixes need no handling.
package logline

import (
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Kind says what span of time a record describes.
type Kind int

const (
	// Stat is an average over the line's own interval (t-Δ, t]: vLLM,
	// SGLang decode, LMDeploy.
	Stat Kind = iota + 1
	// Request is one request's figures, over [t_end - duration, t_end]:
	// llama.cpp eval times, TGI Success spans.
	Request
	// Progress is a running request's live progress (llama.cpp n_decoded).
	Progress
	// Batch is a point event: a prefill batch's new tokens (SGLang).
	Batch
	// Iteration is an engine step counter with the requests it served
	// (TensorRT-LLM iteration stats).
	Iteration
	// Cancelled is a request the server cancelled (llama.cpp "srv stop:
	// cancel task"): it made tokens that no timing line will report.
	Cancelled
	// Spec is a speculation tally, a point event: the tokens drafted and
	// accepted by a finished llama.cpp request ("draft acceptance"), or
	// by vLLM V1 over its logging interval ("SpecDecoding metrics").
	Spec
	// Cached is the prompt tokens a llama.cpp request found in its slot's
	// cache: the position its prompt's processing starts from
	// ("memory_seq_rm [N, end)"), on the first such line of its task
	// (later ones, one per prompt batch, count its own progress).
	Cached
	// Failed is a request that errored, a point event at its error line
	// (TGI's ERROR line in a request's span: a validation error, a
	// generation that failed or came out incomplete). It counts as a
	// miss for every latency objective.
	Failed
)

// Record is what one throughput line says. Numbers a line does not carry
// are negative.
type Record struct {
	Kind   Kind
	Engine string
	// Time is the line's most precise timestamp (zero when it has none).
	Time time.Time
	// Key separates concurrent reporters of one server whose figures add
	// up: vLLM's "Engine 001", SGLang's "DP1", LMDeploy's "DP0", a llama.cpp
	// slot and task.
	Key string
	// Aggregated is vLLM's "N Engines Aggregated" line, which already
	// holds every engine.
	Aggregated bool
	// DefaultGap is the engine's logging interval: the span of a Stat line
	// when the previous line is missing, or further back than an interval
	// (vLLM logs idle intervals at DEBUG, so a gap means idle time).
	DefaultGap time.Duration
	// GapIsExact says the line's average is over all the time since the
	// previous line of its reporter, however long (SGLang).
	GapIsExact bool

	GenTPS, PromptTPS float64 // Stat: tokens/s over the interval
	Tokens            float64 // Request: output tokens; Progress: decoded so far; Batch: new prompt tokens
	PromptTokens      float64 // Request: prompt tokens (llama.cpp prompt eval)
	// Duration is a Request's span; for a Stat line, the span its own
	// numbers say it covers (SGLang: steps x running x accept len / gen
	// throughput), 0 when they do not: it places lines that share a
	// coarse stamp (Placer) and is the first line's span.
	Duration time.Duration
	UserTPS  float64 // the speed one stream saw
	// SinceStartTPS is a Progress line's average since its request began
	// decoding (llama.cpp tg): what dates the tokens decoded before the
	// first line read. UserTPS there is the latest speed (tg_3s).
	SinceStartTPS    float64
	Running, Waiting float64
	KV               float64 // 0..1
	Preemptions      float64
	Iterations       float64 // Iteration: the engine's step counter
	// A Request's own latencies as its line says them (negative:
	// unknown): time per output token after the first, end to end, and
	// queued. llama.cpp's time to first token is its prompt line's
	// Duration, joined by Key (Stream).
	TPOT, Total, Queue time.Duration
	// Spec: draft tokens proposed, and of them accepted.
	Drafted, Accepted float64
	// Cached is the prompt tokens found in the prefix cache: a Cached
	// record's, or a Batch's (SGLang #cached-token) beside its new ones.
	Cached float64
	// TTFT is a llama.cpp request's time from its arrival (TTFTBasis) to
	// its first token, where the log's own stamps time both (negative:
	// unknown; its prompt line's Duration is the prefill then).
	TTFT      time.Duration
	TTFTBasis sample.TTFTBasis
	// InSlot is a llama.cpp request's time in its slot by its line (eval
	// or progress): since the server's loop took it ("selected slot",
	// else its launch), timed by the log's own stamps; negative: unknown.
	// It counts in running from there (Stream): its prompt and the slot's
	// set-up come before the first token its eval time counts from.
	InSlot time.Duration
}

func newRecord(k Kind, engine string) Record {
	return Record{Kind: k, Engine: engine, GenTPS: -1, PromptTPS: -1, Tokens: -1, PromptTokens: -1,
		UserTPS: -1, SinceStartTPS: -1, Running: -1, Waiting: -1, KV: -1, Preemptions: -1, Iterations: -1,
		TPOT: -1, Total: -1, Queue: -1, Drafted: -1, Accepted: -1, Cached: -1, TTFT: -1, InSlot: -1}
}

// valid tells whether the figures a record's kind needs were read.
func (r Record) valid() bool {
	switch r.Kind {
	case Stat:
		return r.GenTPS >= 0
	case Request:
		return (r.Tokens >= 0 || r.PromptTokens >= 0) && r.Duration >= 0
	case Progress, Batch:
		return r.Tokens >= 0
	case Iteration:
		return r.Iterations >= 0
	case Cancelled, Failed:
		return true
	case Cached:
		return r.Cached >= 0
	case Spec:
		return r.Drafted >= 0 && r.Accepted >= 0 && r.Accepted <= r.Drafted
	}
	return false
}
