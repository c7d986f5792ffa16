package vllmsim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Request is one request a Latencies server served, with its true
// latencies: a test's ground truth.
type Request struct {
	Start        time.Time
	Queue, TTFT  time.Duration // TTFT counts from Start, the queue included
	TPOT         time.Duration // per output token after the first
	OutputTokens int
	Aborted      bool
}

// FirstToken is when the request's first token came.
func (r Request) FirstToken() time.Time { return r.Start.Add(r.TTFT) }

// End is when the request finished.
func (r Request) End() time.Time {
	return r.FirstToken().Add(time.Duration(max(0, r.OutputTokens-1)) * r.TPOT)
}

// E2E is the request's end-to-end latency.
func (r Request) E2E() time.Duration { return r.End().Sub(r.Start) }

// Latencies renders vLLM V1 (0.11+) metrics pages of a server that served
// known requests: each histogram observes what vLLM observes, when vLLM
// does (time to first token at the first token, one inter-token gap per
// token, the rest at the request's end), into vLLM's default buckets or
// the ones given.
type Latencies struct {
	Model    string
	Requests []Request
	// Buckets override vLLM's edges per family name (without prefix).
	Buckets map[string][]float64
}

// vLLM V1's default edges (vllm/v1/metrics/loggers.py).
var (
	ttftEdges = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlEdges = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0}
	reqEdges = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
		240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// obs is n observations of one value.
type obs struct {
	v float64
	n int
}

// Page renders the metrics page as it reads at t.
func (l *Latencies) Page(t time.Time) string {
	var ttft, itl, tpot, e2e, queue []obs
	finished := map[string]int{}
	gen := 0
	for _, r := range l.Requests {
		if r.FirstToken().After(t) {
			continue
		}
		ttft = append(ttft, obs{r.TTFT.Seconds(), 1})
		// gaps that ended by t
		gaps := r.OutputTokens - 1
		if r.TPOT > 0 {
			gaps = min(gaps, int(t.Sub(r.FirstToken())/r.TPOT))
		}
		if gaps > 0 {
			itl = append(itl, obs{r.TPOT.Seconds(), gaps})
		}
		if r.OutputTokens > 0 {
			gen += 1 + max(0, gaps)
		}
		if r.End().After(t) {
			continue
		}
		reason := "length"
		if r.Aborted {
			reason = "abort"
		}
		finished[reason]++
		e2e = append(e2e, obs{r.E2E().Seconds(), 1})
		queue = append(queue, obs{r.Queue.Seconds(), 1})
		if r.OutputTokens > 1 {
			tpot = append(tpot, obs{r.TPOT.Seconds(), 1})
		}
	}
	m := fmt.Sprintf("model_name=%q", l.Model)
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\",%s} %d\n", m, gen)
	fmt.Fprintf(&b, "# TYPE vllm:request_success_total counter\n")
	for _, reason := range []string{"abort", "length", "stop"} {
		fmt.Fprintf(&b, "vllm:request_success_total{engine=\"0\",finished_reason=%q,%s} %d\n", reason, m, finished[reason])
	}
	l.hist(&b, "time_to_first_token_seconds", ttftEdges, ttft, m)
	l.hist(&b, "inter_token_latency_seconds", itlEdges, itl, m)
	l.hist(&b, "request_time_per_output_token_seconds", itlEdges, tpot, m)
	l.hist(&b, "e2e_request_latency_seconds", reqEdges, e2e, m)
	l.hist(&b, "request_queue_time_seconds", reqEdges, queue, m)
	return b.String()
}

func (l *Latencies) hist(b *strings.Builder, name string, edges []float64, os []obs, m string) {
	if e, ok := l.Buckets[name]; ok {
		edges = e
	}
	fmt.Fprintf(b, "# TYPE vllm:%s histogram\n", name)
	sum, total := 0.0, 0
	for _, o := range os {
		sum += o.v * float64(o.n)
		total += o.n
	}
	slices.SortFunc(os, func(a, b obs) int { return cmp.Compare(a.v, b.v) })
	i, n := 0, 0
	for _, le := range append(edges[:len(edges):len(edges)], math.Inf(1)) {
		for ; i < len(os) && os[i].v <= le; i++ {
			n += os[i].n
		}
		les := fmt.Sprint(le)
		if math.IsInf(le, 1) {
			les = "+Inf"
		}
		fmt.Fprintf(b, "vllm:%s_bucket{engine=\"0\",le=%q,%s} %d\n", name, les, m, n)
	}
	fmt.Fprintf(b, "vllm:%s_sum{engine=\"0\",%s} %g\nvllm:%s_count{engine=\"0\",%s} %d\n", name, m, sum, name, m, total)
}
