// Package collector reads token throughput from inference servers: it
// scrapes their Prometheus metrics and turns each scrape into a timestamped
// Sample. Sources only produce samples; windows are the joiner's job.
package collector

import (
	"errors"
	"time"
)

// Counter names a cumulative series of a server. Counters only grow
// between restarts of the server.
type Counter int

// The counters tpsmon reads from an engine.
const (
	GenerationTokens Counter = iota // output tokens, all requests
	PromptTokens                    // prefill tokens processed
	Preemptions
	ITLSum   // inter-token latency histogram: sum of seconds
	ITLCount // inter-token latency histogram: observations
	NumCounters
)

var counterNames = [NumCounters]string{"generation_tokens", "prompt_tokens", "preemptions", "itl_sum", "itl_count"}

func (c Counter) String() string { return counterNames[c] }

// Gauge names an instantaneous reading of a server.
type Gauge int

// The gauges tpsmon reads from an engine.
const (
	Running Gauge = iota // requests in the running batch
	Waiting              // queued requests
	KVUsage              // KV cache usage, 0..1
	NumGauges
)

var gaugeNames = [NumGauges]string{"running", "waiting", "kv_cache_usage"}

func (g Gauge) String() string { return gaugeNames[g] }

// Sample is what one scrape of one server read.
type Sample struct {
	Time       time.Time
	Model      string
	Counter    [NumCounters]float64
	HasCounter [NumCounters]bool
	Gauge      [NumGauges]float64
	HasGauge   [NumGauges]bool
}

// SetCounter records counter c.
func (s *Sample) SetCounter(c Counter, v float64) { s.Counter[c], s.HasCounter[c] = v, true }

// SetGauge records gauge g.
func (s *Sample) SetGauge(g Gauge, v float64) { s.Gauge[g], s.HasGauge[g] = v, true }

// ErrMalformed marks metrics text that could not be parsed; the scrape is
// skipped and counted, the daemon goes on.
var ErrMalformed = errors.New("malformed metrics text")

// ErrNoEngineMetrics marks a metrics page that parsed but carries none of
// the engine's throughput series (wrong engine, or stats logging off).
var ErrNoEngineMetrics = errors.New("no engine throughput metrics")
