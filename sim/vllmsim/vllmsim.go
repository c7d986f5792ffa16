// Package vllmsim is a simulated vLLM V1 server: an http.Handler serving a
// /metrics page whose counters and gauges follow a load profile, for
// `tpsmon demo` and tests on machines without an inference server.
package vllmsim

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"
)

// Server simulates one vLLM server. The running batch grows with the
// load, and each stream slows as the batch grows: system TPS rises while
// per-user TPS falls, the trade-off tpsmon reports.
type Server struct {
	Model string
	// SoloTPS is the speed of one stream alone; at a full batch a stream
	// gets half of it.
	SoloTPS float64
	// MaxBatch is the running batch at full load.
	MaxBatch float64
	Load     func(time.Time) float64
	Now      func() time.Time

	mu                     sync.Mutex
	last                   time.Time
	gen, prompt, itlSum, n float64
	preempt                float64
}

// Profile is the demo's load cycle: a ramp, a steady busy stretch that
// overloads the server for a while (queueing), then idle, repeating every
// period.
func Profile(start time.Time, period time.Duration) func(time.Time) float64 {
	return func(t time.Time) float64 {
		f := math.Mod(t.Sub(start).Seconds(), period.Seconds()) / period.Seconds()
		switch {
		case f < 0.25: // ramp up
			return f / 0.25
		case f < 0.65: // steady, saturated
			return 1
		case f < 0.75: // ramp down
			return 1 - (f-0.65)/0.1*0.7
		default: // idle
			return 0
		}
	}
}

// advance integrates the counters up to now.
func (s *Server) advance(now time.Time) (load float64) {
	load = math.Max(0, math.Min(1, s.Load(now)))
	if !s.last.IsZero() && now.After(s.last) {
		dt := now.Sub(s.last).Seconds()
		running := s.running(load)
		perUser := s.perUser(load)
		tokens := running * perUser * dt
		s.gen += tokens
		s.prompt += 3 * tokens
		if tokens > 0 {
			// One inter-token latency observation per token.
			s.itlSum += tokens / perUser
			s.n += tokens
		}
		if load > 0.95 {
			s.preempt += 0.2 * dt
		}
	}
	s.last = now
	return load
}

// perUser is one stream's speed at a load.
func (s *Server) perUser(load float64) float64 {
	return s.SoloTPS * (1 - 0.5*load)
}

func (s *Server) running(load float64) float64 {
	if load == 0 {
		return 0
	}
	return math.Max(1, math.Round(s.MaxBatch*load))
}

// ServeHTTP renders the metrics page.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	s.mu.Lock()
	load := s.advance(now())
	gen, prompt, itlSum, n, pre := s.gen, s.prompt, s.itlSum, s.n, s.preempt
	s.mu.Unlock()
	waiting := 0.0
	if load > 0.9 {
		waiting = math.Round((load - 0.9) * 200)
	}
	kv := 0.05 + 0.9*load
	m := fmt.Sprintf(`model_name=%q`, s.Model)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintf(w, `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",%[1]s} %[2]g
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",%[1]s} %[3]g
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",%[1]s} %[4]g
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",%[1]s} %[5]g
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",%[1]s} %[6]g
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",%[1]s} %[7]g
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",%[1]s} %[8]g
vllm:inter_token_latency_seconds_sum{engine="0",%[1]s} %[9]g
vllm:inter_token_latency_seconds_count{engine="0",%[1]s} %[8]g
`, m, s.running(load), waiting, kv, math.Floor(pre), math.Floor(prompt), math.Floor(gen), math.Floor(n), itlSum)
}
