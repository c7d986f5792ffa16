// Package sample holds what tpsmon's sources read and the joiner takes:
// a server's sample (counters, gauges, intervals of time a log line speaks
// for), a GPU's sample, the values refused on the way with their reasons,
// and the physical bounds they are checked against. It is a leaf: the
// collectors, nvml, the simulators and the joiner import it, and it
// imports nothing of tpsmon, no HTTP and no cgo, so the joiner builds
// without the scraper's dependencies.
package sample

import (
	"time"
)

// Counter names a cumulative series of a server. Counters only grow
// between restarts of the server.
type Counter int

// The counters tpsmon reads from an engine.
const (
	GenerationTokens Counter = iota // output tokens, all requests, counted as produced
	PromptTokens                    // prefill tokens processed
	Preemptions                     // preemptions (SGLang: retractions)
	ITLSum                          // per-user speed: seconds (inter-token latency sum, or decode time)
	ITLCount                        // per-user speed: tokens (observations) over those seconds
	// Counted only when a request completes: their tokens are spread back
	// over the time the requests generated them.
	CompletionTokens
	CompletionSeconds  // summed duration of the completed requests' generation
	CompletionRequests // completed requests
	// Iterations is an engine step counter (TensorRT-LLM, TGI's decode
	// batches, vLLM V1's step histogram count): each step makes one token
	// per generating request.
	Iterations
	// Decodes counts an engine's decode calls (llama.cpp); times the
	// SlotsPerDecode gauge, a lifetime average, it is the live count of
	// busy-slot decodes, one token each.
	Decodes
	// FinishedRequests counts the requests the engine finished, whatever
	// their reason; AbortedRequests those it aborted or that failed
	// (vLLM's finished_reason "abort", SGLang's aborted requests, TGI's
	// failures): misses, whether or not its histograms observed them.
	FinishedRequests
	AbortedRequests
	// The prompt's tokens by where their KV came from, where the engine
	// splits them: computed by prefill, hit in the local prefix cache,
	// transferred from another instance (disaggregated serving). Whether
	// PromptTokens counts all three or only the computed ones is the
	// engine's: the analysis knows which (see analysis/prompt.go).
	PromptComputed
	PromptCached
	PromptExternal
	// Prefix-cache lookups, in tokens queried and tokens hit (vLLM V1).
	PrefixQueries
	PrefixHits
	// Speculative decoding: verification steps, tokens drafted, drafted
	// tokens the target model accepted.
	SpecDrafts
	SpecDraftTokens
	SpecAccepted
	NumCounters
)

var counterNames = [NumCounters]string{"generation_tokens", "prompt_tokens", "preemptions", "itl_sum", "itl_count",
	"completion_tokens", "completion_seconds", "completion_requests", "iterations", "decodes",
	"finished_requests", "aborted_requests",
	"prompt_computed", "prompt_cached", "prompt_external", "prefix_queries", "prefix_hits",
	"spec_drafts", "spec_draft_tokens", "spec_accepted"}

func (c Counter) String() string { return counterNames[c] }

// Gauge names an instantaneous reading of a server.
type Gauge int

// The gauges tpsmon reads from an engine.
const (
	Running Gauge = iota // requests in the running batch
	Waiting              // queued requests
	KVUsage              // KV cache usage, 0..1
	// GenRate is an engine's own system throughput gauge (tokens/s over its
	// last log interval; SGLang), stale when idle.
	GenRate
	// GenRequests is the number of requests in the generation phase
	// (TensorRT-LLM), the tokens made per iteration.
	GenRequests
	// SlotsPerDecode is the mean number of busy slots per decode call
	// since the server started (llama.cpp).
	SlotsPerDecode
	// WaitingCapacity and WaitingDeferred split Waiting by why the
	// requests wait (vLLM): for KV cache memory, or for anything else
	// (a KV transfer, a grammar, a LoRA adapter).
	WaitingCapacity
	WaitingDeferred
	// Awake is 1 while the engine is awake, 0 while it sleeps holding its
	// GPUs (vLLM sleep mode); averaged over data-parallel engines.
	Awake
	// SpecAcceptRate (0..1) and SpecAcceptLength (tokens per verification
	// step) are an engine's own speculative-decoding gauges (SGLang),
	// averaged over its recent steps.
	SpecAcceptRate
	SpecAcceptLength
	NumGauges
)

var gaugeNames = [NumGauges]string{"running", "waiting", "kv_cache_usage", "gen_rate", "gen_requests", "slots_per_decode",
	"waiting_capacity", "waiting_deferred", "awake", "spec_accept_rate", "spec_accept_length"}

func (g Gauge) String() string { return gaugeNames[g] }

// Averaged says whether the gauge is a ratio or a per-engine state, which
// data-parallel engines' series average rather than sum.
func (g Gauge) Averaged() bool {
	switch g {
	case KVUsage, Awake, SpecAcceptRate, SpecAcceptLength:
		return true
	}
	return false
}

// Server is what one scrape of one server read.
type Server struct {
	Time       time.Time
	Engine     string // the dialect that read it
	Model      string
	Counter    [NumCounters]float64
	HasCounter [NumCounters]bool
	// Derived marks counters tpsmon built from other signals (collector's
	// Deriver) rather than read: they start when tpsmon started watching.
	Derived  [NumCounters]bool
	Gauge    [NumGauges]float64
	HasGauge [NumGauges]bool
	// Intervals carries tokens that belong to a stretch of time rather
	// than to the moment of the scrape (completion-time counters spread
	// back, engine rate gauges).
	Intervals []Interval
	// Discarded counts the counters a Guard removed from the sample (a
	// decrease held for confirmation included), and a sample left out of
	// a derivation; Discards says which values were refused and why, lost
	// gauges too. A sample that lost counters does not count as coverage:
	// its window knows less of its tokens. A lost gauge costs only itself.
	Discarded int
	Discards  []Discard
	// Rewind, when set, says the server's counters read since then are in
	// doubt (they cannot be one process's): the joiner forgets them and
	// the coverage they gave, and their next reading starts them anew, the
	// span between a hole. Suspect says this sample's counters were
	// dropped for that reason (Guard).
	Rewind  time.Time
	Suspect bool
	// Hists are the latency histograms the page carried, cumulative.
	// HistsHeld says the page's histograms were left unread: the scraper
	// reads them only on the pages around each window's edge (a window
	// needs its growth, not every step of it), and a reading made later
	// of a later page covers this sample's time (collector.Scraper).
	Hists     [NumHists]Histogram
	HasHist   [NumHists]bool
	HistsHeld bool
}

// SetCounter records counter c.
func (s *Server) SetCounter(c Counter, v float64) { s.Counter[c], s.HasCounter[c] = v, true }

// SetGauge records gauge g.
func (s *Server) SetGauge(g Gauge, v float64) { s.Gauge[g], s.HasGauge[g] = v, true }

// SetHist records histogram h.
func (s *Server) SetHist(h Hist, v Histogram) { s.Hists[h], s.HasHist[h] = v, true }

// Hist names a latency histogram of a server.
type Hist int

// The latency histograms tpsmon reads from an engine.
const (
	HistTTFT    Hist = iota // time to first token, one observation per request
	HistITL                 // inter-token latency, one observation per token gap
	HistTPOT                // time per output token, one observation per request
	HistE2E                 // end-to-end request latency
	HistQueue               // time a request waited before it was scheduled
	HistPrefill             // a request's prefill time
	HistDecode              // a request's decode time
	NumHists
)

var histNames = [NumHists]string{"ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode"}

func (h Hist) String() string { return histNames[h] }

// HistBucket is one cumulative bucket: Count observations at most Le.
type HistBucket struct{ Le, Count float64 }

// Histogram is one reading of a Prometheus histogram: its buckets,
// cumulative and ascending to +Inf, and the sum of its observations (NaN
// when the page has none).
type Histogram struct {
	Buckets []HistBucket
	Sum     float64
}
