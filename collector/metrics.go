package collector

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/sample"
)

// Ref names one exposed series: a metric name, optionally narrowed by
// label values (`sglang:realtime_tokens_total{mode="decode"}`).
type Ref struct {
	Name   string
	Labels map[string]string
}

// refs builds Refs from names, each optionally followed by one
// {label="value"} matcher.
func refs(names ...string) []Ref {
	out := make([]Ref, 0, len(names))
	for _, n := range names {
		r := Ref{Name: n}
		if i := strings.IndexByte(n, '{'); i > 0 {
			r.Name = n[:i]
			k, v, _ := strings.Cut(strings.Trim(n[i:], "{}"), "=")
			r.Labels = map[string]string{k: strings.Trim(v, `"`)}
		}
		out = append(out, r)
	}
	return out
}

// Dialect says which exposed series carry each counter and gauge for one
// engine. Refs are tried in order; the first present wins, so the newest
// name comes first. Samples of one series are summed over label sets
// (data-parallel engines are one server), except KV usage, a ratio, which
// is averaged.
type Dialect struct {
	Engine   string
	Counters [sample.NumCounters][]Ref
	Gauges   [sample.NumGauges][]Ref
	// ModelLabels name the labels that carry the served model.
	ModelLabels []string
	// SingleRank names the label of tensor-parallel ranks, which all see
	// the same batch: only rank 0 is read, never a sum.
	SingleRank string
	// ModelPath is the server's endpoint that names its model, for
	// engines whose metrics do not (JSON: OpenAI's data[0].id or TGI's
	// model_id).
	ModelPath string

	once   sync.Once
	wanted map[string]bool
	// unhist is wanted less the series read only for histograms: the
	// pages a scraper leaves their histograms unread on.
	unhist map[string]bool
	relays []relay
}

// relay is a prefix under which another process re-exposes an engine's
// series, and the engine's own prefix it stands for (engine.MetricRelays).
type relay struct{ from, to string }

// registry is the dialect's engine as collector/engine lists it: its
// marks and relays are data there, not cases here. A dialect the registry
// lacks (a bug, which a test ties) has neither.
func (d *Dialect) registry() engine.Engine {
	e, _ := engine.Lookup(d.Engine)
	return e
}

// relayOf returns the relay whose prefix name carries (nil: none).
func (d *Dialect) relayOf(name []byte) *relay {
	for i := range d.relays {
		if from := d.relays[i].from; len(name) >= len(from) && string(name[:len(from)]) == from {
			return &d.relays[i]
		}
	}
	return nil
}

// unrelay renames a page's relayed series to the engine's own names.
func (d *Dialect) unrelay(p Page) {
	d.names()
	for name, ss := range p {
		if r := d.relayOf([]byte(name)); r != nil {
			own := r.to + name[len(r.from):]
			p[own] = append(p[own], ss...)
			delete(p, name)
		}
	}
}

func prefixed(prefix string, names ...string) []Ref {
	var out []string
	for _, n := range names {
		out = append(out, prefix+n)
	}
	return refs(append(out, names...)...)
}

// VLLM reads vLLM V0 and V1. Inter-token latency comes from
// inter_token_latency_seconds (0.11+), else from
// time_per_output_token_seconds, which held the same quantity before.
var VLLM = Dialect{
	Engine: engine.VLLM,
	Counters: [sample.NumCounters][]Ref{
		sample.GenerationTokens: refs("vllm:generation_tokens_total"),
		sample.PromptTokens:     refs("vllm:prompt_tokens_total"),
		sample.Preemptions:      refs("vllm:num_preemptions_total"),
		sample.ITLSum:           refs("vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum"),
		sample.ITLCount:         refs("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"),
		sample.FinishedRequests: refs("vllm:request_success_total"),
		sample.AbortedRequests:  refs(`vllm:request_success_total{finished_reason="abort"}`),
		// V1: prompt_tokens_total counts all three sources.
		sample.PromptComputed:  refs(`vllm:prompt_tokens_by_source_total{source="local_compute"}`),
		sample.PromptCached:    refs(`vllm:prompt_tokens_by_source_total{source="local_cache_hit"}`),
		sample.PromptExternal:  refs(`vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}`),
		sample.PrefixQueries:   refs("vllm:prefix_cache_queries_total"),
		sample.PrefixHits:      refs("vllm:prefix_cache_hits_total"),
		sample.SpecDrafts:      refs("vllm:spec_decode_num_drafts_total"),
		sample.SpecDraftTokens: refs("vllm:spec_decode_num_draft_tokens_total"),
		sample.SpecAccepted:    refs("vllm:spec_decode_num_accepted_tokens_total"),
		// V1 observes its step histogram once per engine step: the count
		// is the engine's steps (prefill-only steps included), the
		// decode-step rate of the ceiling's MBU; V0 has none (absent).
		sample.Iterations: refs("vllm:iteration_tokens_total_count"),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running:         refs("vllm:num_requests_running"),
		sample.Waiting:         refs("vllm:num_requests_waiting"),
		sample.KVUsage:         refs("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
		sample.WaitingCapacity: refs(`vllm:num_requests_waiting_by_reason{reason="capacity"}`),
		sample.WaitingDeferred: refs(`vllm:num_requests_waiting_by_reason{reason="deferred"}`),
		// The legacy state gauge first; newer versions add engine_fully_awake
		// (0 also while partly woken: weights back, KV cache not yet).
		sample.Awake: refs(`vllm:engine_sleep_state{sleep_state="awake"}`, "vllm:engine_fully_awake"),
	},
	ModelLabels: []string{"model_name"},
}

// NIM reads NVIDIA NIM for LLMs: vLLM's series without the prefix (and
// with it, in releases built on newer vLLM).
var NIM = Dialect{
	Engine: engine.NIM,
	Counters: [sample.NumCounters][]Ref{
		sample.GenerationTokens: prefixed("vllm:", "generation_tokens_total"),
		sample.PromptTokens:     prefixed("vllm:", "prompt_tokens_total"),
		sample.Preemptions:      prefixed("vllm:", "num_preemptions_total"),
		sample.ITLSum:           prefixed("vllm:", "inter_token_latency_seconds_sum", "time_per_output_token_seconds_sum"),
		sample.ITLCount:         prefixed("vllm:", "inter_token_latency_seconds_count", "time_per_output_token_seconds_count"),
		sample.FinishedRequests: prefixed("vllm:", "request_success_total"),
		sample.AbortedRequests:  refs(`vllm:request_success_total{finished_reason="abort"}`, `request_success_total{finished_reason="abort"}`),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running: prefixed("vllm:", "num_requests_running"),
		sample.Waiting: prefixed("vllm:", "num_requests_waiting"),
		sample.KVUsage: prefixed("vllm:", "kv_cache_usage_perc", "gpu_cache_usage_perc"),
	},
	ModelLabels: []string{"model_name"},
}

// SGLang: the real-time decode counter where the version has it, else the
// gen_throughput gauge (gated on running requests), else the
// completion-time generation counter spread over request latency.
var SGLang = Dialect{
	Engine: engine.SGLang,
	Counters: [sample.NumCounters][]Ref{
		sample.GenerationTokens:   refs(`sglang:realtime_tokens_total{mode="decode"}`),
		sample.PromptTokens:       refs("sglang:prompt_tokens_total"),
		sample.Preemptions:        refs("sglang:num_retracted_requests_total"),
		sample.ITLSum:             refs("sglang:inter_token_latency_seconds_sum", "sglang:time_per_output_token_seconds_sum"),
		sample.ITLCount:           refs("sglang:inter_token_latency_seconds_count", "sglang:time_per_output_token_seconds_count"),
		sample.CompletionTokens:   refs("sglang:generation_tokens_total"),
		sample.CompletionSeconds:  refs("sglang:e2e_request_latency_seconds_sum"),
		sample.CompletionRequests: refs("sglang:e2e_request_latency_seconds_count"),
		sample.AbortedRequests:    refs("sglang:num_aborted_requests_total"),
		// The real-time split (newest); prompt_tokens_total counts at
		// completion, so the split is all prompt tokens on its own.
		sample.PromptComputed: refs(`sglang:realtime_tokens_total{mode="prefill_compute"}`),
		sample.PromptCached:   refs(`sglang:realtime_tokens_total{mode="prefill_cache"}`),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running:          refs("sglang:num_running_reqs"),
		sample.Waiting:          refs("sglang:num_queue_reqs"),
		sample.KVUsage:          refs("sglang:token_usage"),
		sample.GenRate:          refs("sglang:gen_throughput"),
		sample.SpecAcceptRate:   refs("sglang:spec_accept_rate"),
		sample.SpecAcceptLength: refs("sglang:spec_accept_length"),
	},
	ModelLabels: []string{"model_name", "name"},
	SingleRank:  "tp_rank",
}

// TGI counts output tokens only at completion (tgi_request_generated_tokens);
// decode forward calls times the batch size count them live, reconciled
// with the completion count. Without the batch series they are spread
// over the mean inference duration of the requests. Per-user speed is
// 1 / mean(time per token), which includes prefill.
var TGI = Dialect{
	Engine: engine.TGI,
	Counters: [sample.NumCounters][]Ref{
		sample.Iterations:         refs(`tgi_batch_inference_count{method="decode"}`),
		sample.PromptTokens:       refs("tgi_request_input_length_sum"),
		sample.ITLSum:             refs("tgi_request_mean_time_per_token_duration_sum"),
		sample.ITLCount:           refs("tgi_request_mean_time_per_token_duration_count"),
		sample.CompletionTokens:   refs("tgi_request_generated_tokens_sum"),
		sample.CompletionSeconds:  refs("tgi_request_inference_duration_sum"),
		sample.CompletionRequests: refs("tgi_request_inference_duration_count"),
		// Every err label summed (validation, overloaded, generation,
		// incomplete, dropped…): requests that failed, which the
		// histograms, observed on success only, leave out.
		sample.AbortedRequests: refs("tgi_request_failure"),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running:     refs("tgi_batch_current_size"),
		sample.Waiting:     refs("tgi_queue_size"),
		sample.GenRequests: refs("tgi_batch_current_size"),
	},
	ModelPath: "/info",
}

// LlamaCPP counts output tokens at slot release, exactly; decode calls
// times the busy slots per call count them live, and the two are
// reconciled. Without the decode series (before 2024-09) the summed
// per-slot generation seconds give the spread; they give the per-user
// speed always.
var LlamaCPP = Dialect{
	Engine: engine.LlamaCpp,
	Counters: [sample.NumCounters][]Ref{
		sample.PromptTokens:      refs("llamacpp:prompt_tokens_total"),
		sample.ITLSum:            refs("llamacpp:tokens_predicted_seconds_total"),
		sample.ITLCount:          refs("llamacpp:tokens_predicted_total"),
		sample.CompletionTokens:  refs("llamacpp:tokens_predicted_total"),
		sample.CompletionSeconds: refs("llamacpp:tokens_predicted_seconds_total"),
		sample.Decodes:           refs("llamacpp:n_decode_total"),
		// prompt_tokens_total excludes cached tokens (its help says so):
		// it is the computed count, and cached ones are apart.
		sample.PromptComputed:  refs("llamacpp:prompt_tokens_total"),
		sample.PromptCached:    refs("llamacpp:prompt_tokens_cached_total"),
		sample.SpecDrafts:      refs("llamacpp:spec_decode_num_drafts_total"),
		sample.SpecDraftTokens: refs("llamacpp:spec_decode_num_draft_tokens_total"),
		sample.SpecAccepted:    refs("llamacpp:spec_decode_num_accepted_tokens_total"),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running:        refs("llamacpp:requests_processing"),
		sample.Waiting:        refs("llamacpp:requests_deferred"),
		sample.KVUsage:        refs("llamacpp:kv_cache_usage_ratio"),
		sample.SlotsPerDecode: refs("llamacpp:n_busy_slots_per_decode"),
	},
	ModelPath: "/v1/models",
}

// Triton with the TensorRT-LLM backend: each engine iteration makes one
// token per generation request; the iteration rate is the per-user speed.
var Triton = Dialect{
	Engine: engine.Triton,
	Counters: [sample.NumCounters][]Ref{
		sample.Iterations:         refs(`nv_trt_llm_general_metrics{general_type="iteration_counter"}`),
		sample.PromptTokens:       refs("nv_llm_input_token_len_sum"),
		sample.CompletionTokens:   refs("nv_llm_output_token_len_sum"),
		sample.CompletionRequests: refs("nv_llm_output_token_len_count"),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running:     refs(`nv_trt_llm_request_metrics{request_type="active"}`),
		sample.Waiting:     refs(`nv_trt_llm_request_metrics{request_type="waiting"}`, "nv_inference_pending_request_count"),
		sample.KVUsage:     refs(`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`),
		sample.GenRequests: refs(`nv_trt_llm_inflight_batcher_metrics{inflight_batcher_specific_metric="generation_requests"}`),
	},
	ModelLabels: []string{"model"},
}

// TRTLLM is trtllm-serve's own Prometheus endpoint (trtllm_ prefix, or
// trtllm: when Dynamo re-exposes it).
var TRTLLM = Dialect{
	Engine: engine.TRTLLM,
	Counters: [sample.NumCounters][]Ref{
		sample.GenerationTokens: refs("trtllm_generation_tokens_total", "trtllm:generation_tokens_total"),
		sample.PromptTokens:     refs("trtllm_prompt_tokens_total", "trtllm:prompt_tokens_total"),
		sample.ITLSum:           refs("trtllm_time_per_output_token_seconds_sum", "trtllm:time_per_output_token_seconds_sum"),
		sample.ITLCount:         refs("trtllm_time_per_output_token_seconds_count", "trtllm:time_per_output_token_seconds_count"),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running: refs("trtllm_num_requests_running", "trtllm:num_requests_running"),
		sample.Waiting: refs("trtllm_num_requests_waiting", "trtllm:num_requests_waiting"),
		sample.KVUsage: refs("trtllm_kv_cache_utilization", "trtllm:kv_cache_utilization"),
	},
	ModelLabels: []string{"model_name"},
}

// LMDeploy counts output tokens every iteration; the engine label is the
// data-parallel rank, summed.
var LMDeploy = Dialect{
	Engine: engine.LMDeploy,
	Counters: [sample.NumCounters][]Ref{
		sample.GenerationTokens: refs("lmdeploy:generation_tokens_total"),
		sample.PromptTokens:     refs("lmdeploy:prompt_tokens_total"),
		sample.ITLSum:           refs("lmdeploy:time_per_output_token_seconds_sum"),
		sample.ITLCount:         refs("lmdeploy:time_per_output_token_seconds_count"),
	},
	Gauges: [sample.NumGauges][]Ref{
		sample.Running: refs("lmdeploy:num_requests_running"),
		sample.Waiting: refs("lmdeploy:num_requests_waiting"),
		sample.KVUsage: refs("lmdeploy:gpu_cache_usage_perc"),
	},
	ModelLabels: []string{"model_name"},
}

// dialects is the detection order: prefixed engines before NIM's bare names.
var dialects = []*Dialect{&VLLM, &SGLang, &LMDeploy, &LlamaCPP, &TGI, &Triton, &TRTLLM, &NIM}

// DialectFor returns the metrics dialect of an engine named as the
// registry knows it (a name or an alias); nil for engine.Auto, which
// detects it from the first page.
func DialectFor(name string) (*Dialect, error) {
	if name == engine.Auto {
		return nil, nil
	}
	e, err := engine.Lookup(name)
	if err != nil {
		return nil, err
	}
	if err := e.CheckMetrics(); err != nil {
		return nil, err
	}
	for _, d := range dialects {
		if d.Engine == e.Name {
			return d, nil
		}
	}
	// The registry and dialects are tied by a test: this is a bug.
	return nil, fmt.Errorf("engine %s: the registry claims metrics but collector has no dialect", e.Name)
}

// series is one exposed sample: its labels and value, and for a
// histogram bucket of a cached series what the histogram reader needs of
// its labels, worked out once (nil: read from the labels).
type series struct {
	labels map[string]string
	value  float64
	bucket *bucketKey
	pos    int32 // its line among the page's kept ones (a cached parse's)
}

// bucketKey is a bucket series' edge and the rest of its labels: the
// buckets of one label set share others.
type bucketKey struct {
	le     float64
	leOK   bool   // le parses as a number
	others string // the labels but le, sorted, as name, NUL, value, NUL
}

// bucketKeyOf works out a bucket series' key; nil when it has no le.
func bucketKeyOf(labels map[string]string) *bucketKey {
	le, ok := labels["le"]
	if !ok {
		return nil
	}
	k := &bucketKey{}
	v, err := strconv.ParseFloat(le, 64)
	k.le, k.leOK = v, err == nil
	names := make([]string, 0, len(labels)-1)
	for n := range labels {
		if n != "le" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(0)
		b.WriteString(labels[n])
		b.WriteByte(0)
	}
	k.others = b.String()
	return k
}

// Page is a parsed metrics page, flattened: histograms and summaries
// expose name_sum and name_count, as excerpts without TYPE lines already do.
type Page map[string][]series

// ParsePage reads one metrics page in the Prometheus text format.
func ParsePage(r io.Reader) (Page, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	out := make(Page, len(fams))
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(n string, v float64) { out[n] = append(out[n], series{labels: labels, value: v}) }
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
				addBuckets(out, name, labels, h)
			case dto.MetricType_SUMMARY:
				add(name+"_sum", m.GetSummary().GetSampleSum())
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
			default:
				add(name, m.GetUntyped().GetValue())
			}
		}
	}
	return out, nil
}

// Detect names the dialect whose marks the page carries.
func Detect(p Page) (*Dialect, error) {
	names := make([]string, 0, len(p))
	for n := range p {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, d := range dialects {
		e := d.registry()
		for _, mark := range append(e.MetricMarks[:len(e.MetricMarks):len(e.MetricMarks)], e.MetricRelays...) {
			for _, n := range names {
				if strings.HasPrefix(n, mark) {
					return d, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("%w: no known engine's metrics on the page (%d metric names)", ErrNoEngineMetrics, len(names))
}

// Parse reads one metrics page in the Prometheus text format.
func (d *Dialect) Parse(r io.Reader) (sample.Server, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return sample.Server{}, err
	}
	p, err := d.ParseFiltered(b)
	if err != nil {
		return sample.Server{}, err
	}
	return d.Read(p)
}

// names returns the exposed names the dialect reads.
func (d *Dialect) names() map[string]bool {
	d.once.Do(func() {
		if e := d.registry(); len(e.MetricRelays) > 0 && len(e.MetricMarks) > 0 {
			for _, r := range e.MetricRelays {
				d.relays = append(d.relays, relay{r, e.MetricMarks[0]})
			}
		}
		d.unhist = map[string]bool{}
		for _, rs := range d.Counters {
			for _, r := range rs {
				d.unhist[r.Name] = true
			}
		}
		for _, rs := range d.Gauges {
			for _, r := range rs {
				d.unhist[r.Name] = true
			}
		}
		d.wanted = maps.Clone(d.unhist)
		for _, n := range histNames(d.Engine) {
			d.wanted[n] = true
		}
	})
	return d.wanted
}

// ParseFiltered parses only the lines of the series the dialect reads:
// a real server's page is mostly histogram buckets and runtime series
// tpsmon never looks at, and expfmt's cost grows with every line. The
// lines kept lose their TYPE comments, so histogram parts arrive as the
// untyped name_sum and name_count series Read expects anyway. Lines of
// other series are not validated.
func (d *Dialect) ParseFiltered(page []byte) (Page, error) {
	return d.parseFiltered(page, nil)
}

// parseFiltered is ParseFiltered with a cache of the series seen on this
// server's earlier pages (nil: none). With a cache the page returned is
// the cache's, its slices reused: valid until the cache's next parse.
func (d *Dialect) parseFiltered(page []byte, cache *seriesCache) (Page, error) {
	wanted := d.names()
	if cache != nil && cache.unhist {
		wanted = d.unhist
	}
	var out Page
	if cache != nil {
		out = cache.start(len(wanted))
	} else {
		out = make(Page, len(wanted))
	}
	var missed bytes.Buffer
	// A page prints a family's series together (a histogram's buckets),
	// so the last name's verdict is asked first.
	var last []byte
	lastWanted := false
	var lastRelay *relay
	for len(page) > 0 {
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i], page[i+1:]
		} else {
			page = nil
		}
		t := line
		for len(t) > 0 && (t[0] == ' ' || t[0] == '\t') {
			t = t[1:]
		}
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		var name []byte
		if n := len(last); n > 0 && len(t) > n && (t[n] == '{' || blank(t[n])) && bytes.Equal(t[:n], last) {
			name = t[:n] // the name of the line before (a histogram's next bucket): no scan for its end
		} else {
			name = t[:nameEnd(t)]
		}
		if !bytes.Equal(name, last) {
			last, lastWanted, lastRelay = name, wanted[string(name)], nil
			if r := d.relayOf(name); !lastWanted && r != nil && wanted[r.to+string(name[len(r.from):])] {
				lastWanted, lastRelay = true, r
			}
		}
		if !lastWanted {
			continue
		}
		end := -1 // where the name ends in line, when known
		if lastRelay != nil {
			// A relayed series is read under the engine's own name.
			line = append([]byte(lastRelay.to), t[len(lastRelay.from):]...)
			end = len(name) - len(lastRelay.from) + len(lastRelay.to)
		} else if len(line) == len(t) {
			end = len(name)
		}
		if cache != nil {
			if err := cache.add(out, line, end); err != nil {
				return nil, err
			}
			continue
		}
		missed.Write(line)
		missed.WriteByte('\n')
	}
	if cache != nil {
		cache.end(out)
		return out, nil
	}
	return ParsePage(&missed)
}

// nameEnd returns where a sample line's metric name ends: at its labels
// or the first blank.
func nameEnd(t []byte) int {
	// IndexByte is vectorized: three scans of a name beat one loop over
	// its bytes.
	e := len(t)
	for _, c := range []byte{'{', ' ', '\t'} {
		if i := bytes.IndexByte(t[:e], c); i >= 0 {
			e = i
		}
	}
	return e
}

// seriesCache remembers, per server, the series of each line kept from
// its pages, by the line's text before the value. A server prints the
// same series on every page; parsing their labels was most of a scrape's
// cost, so only a line never seen before goes through expfmt, and a seen
// one has just its value read. The page it fills is kept from one parse to
// the next, its slices reused, and the lines of one name (a histogram's
// buckets) go into their slice without a map access each.
type seriesCache struct {
	// unhist marks a cache for pages read without their histograms: only
	// the series the counters and gauges are read from are kept.
	unhist bool
	known  map[string]*seriesName
	page   Page
	// run is the series of runName read so far on this page, not yet
	// stored in page.
	run     []series
	runName string

	// values are the page's kept lines' values, in page order (series.pos).
	values []float64
	// names is the page's shape: its series in page order (nil: a line
	// the cache does not know); lastNames the last whole page's. gen
	// changes whenever a page's shape differs from the one before it
	// (differs), and plan, Read's choices, holds while it does not. A
	// page's line is first taken for the series at its place on the last
	// page: one comparison of its text where a lookup hashed it.
	names, lastNames []*seriesName
	differs          bool
	gen              uint64
	plan             readPlan
}

type seriesName struct {
	key    string // the line's text before its value
	name   string
	labels map[string]string // shared by every page: read only
	bucket *bucketKey        // for a bucket series; shared, read only
}

// maxCachedSeries bounds the cache: a server whose label values change
// on every page (a request id in a label) must not grow tpsmon.
const maxCachedSeries = 4096

// start empties the cache's page for a new parse, keeping its slices.
func (c *seriesCache) start(names int) Page {
	if c.page == nil {
		c.page = make(Page, names)
	}
	for k, ss := range c.page {
		clear(ss) // drop the last page's label maps
		c.page[k] = ss[:0]
	}
	c.run, c.runName = nil, ""
	c.values, c.names, c.differs = c.values[:0], c.names[:0], false
	return c.page
}

// saw notes the page's next series (nil: one the cache does not know),
// and its value.
func (c *seriesCache) saw(n *seriesName, v float64) int32 {
	if i := len(c.names); n == nil || i >= len(c.lastNames) || c.lastNames[i] != n {
		c.differs = true
	}
	c.names = append(c.names, n)
	c.values = append(c.values, v)
	return int32(len(c.values) - 1)
}

// end stores the last run and leaves out the names this page lacked, as
// a fresh page would.
func (c *seriesCache) end(out Page) {
	c.flush(out)
	for k, ss := range out {
		if len(ss) == 0 {
			delete(out, k)
		}
	}
	if c.differs || len(c.names) != len(c.lastNames) {
		c.gen++
	}
	c.names, c.lastNames = c.lastNames, c.names
}

// put appends s to name's series.
func (c *seriesCache) put(out Page, name string, s series) {
	if c.run == nil || name != c.runName {
		c.flush(out)
		c.run, c.runName = out[name], name
	}
	c.run = append(c.run, s)
}

// flush stores the run in out.
func (c *seriesCache) flush(out Page) {
	if c.run != nil {
		out[c.runName] = c.run
	}
	c.run, c.runName = nil, ""
}

// add puts the series of one kept line (without its newline) into out,
// in page order. end is where its name ends (-1: not worked out yet).
func (c *seriesCache) add(out Page, line []byte, end int) error {
	key, rest := splitValue(line, end)
	if key != nil {
		n := c.atPlace(key)
		if n == nil {
			n = c.known[string(key)]
		}
		if n != nil {
			if v, ok := plainValue(rest); ok {
				c.put(out, n.name, series{n.labels, v, n.bucket, c.saw(n, v)})
				return nil
			}
		}
	}
	// Unseen, or a value only expfmt can judge: the full parser decides,
	// with the errors it always gave.
	c.flush(out)
	p, err := ParsePage(bytes.NewReader(append(line[:len(line):len(line)], '\n')))
	if err != nil {
		return err
	}
	for name, ss := range p {
		var n *seriesName
		if key != nil && len(ss) == 1 {
			if c.known == nil || len(c.known) >= maxCachedSeries {
				c.known = make(map[string]*seriesName)
				clear(c.lastNames) // forgotten: the next page finds none in place
			}
			k := string(key)
			n = &seriesName{k, name, ss[0].labels, bucketKeyOf(ss[0].labels)}
			c.known[k] = n
		}
		for i := range ss {
			ss[i].pos = c.saw(n, ss[i].value)
			n = nil
		}
		c.differs = true // a line parsed in full: new, or an odd value
		out[name] = append(out[name], ss...)
	}
	return nil
}

// atPlace is the series at this line's place on the last page, when the
// line names it.
func (c *seriesCache) atPlace(key []byte) *seriesName {
	if i := len(c.names); i < len(c.lastNames) {
		if n := c.lastNames[i]; n != nil && n.key == string(key) {
			return n
		}
	}
	return nil
}

// splitValue splits a sample line into the series (name and labels, as
// written) and the rest: value and optional timestamp. The value cannot
// hold a '}', so the label set ends at the line's last one. nil when the
// line is not of that shape. end is where the name ends, -1 when not
// worked out yet.
func splitValue(line []byte, end int) (key, rest []byte) {
	if end < 0 {
		end = nameEnd(line)
	}
	if end <= 0 || end == len(line) {
		return nil, nil
	}
	if line[end] == '{' {
		end = bytes.LastIndexByte(line, '}') + 1
		if end <= 0 {
			return nil, nil
		}
	}
	return line[:end], line[end:]
}

func blank(b byte) bool { return b == ' ' || b == '\t' }

// plainValue reads " value" or " value timestamp" where both are plain
// decimal numbers; anything else (NaN, Inf, hex, a stray character) is
// left to expfmt.
func plainValue(rest []byte) (float64, bool) {
	if !plainText(rest) {
		return 0, false
	}
	i := 0
	for i < len(rest) && blank(rest[i]) {
		i++
	}
	j := i
	for j < len(rest) && !blank(rest[j]) {
		j++
	}
	val := rest[i:j]
	for j < len(rest) && blank(rest[j]) {
		j++
	}
	if ts := rest[j:]; len(ts) > 0 {
		for _, b := range ts {
			if blank(b) {
				return 0, false // a third field
			}
		}
		if _, err := strconv.ParseInt(string(ts), 10, 64); err != nil {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(string(val), 64)
	return v, err == nil
}

// plainText tells whether rest starts with a blank, does not end with one
// (expfmt then wants a timestamp) and holds only decimal numbers' bytes.
func plainText(rest []byte) bool {
	if len(rest) < 2 || !blank(rest[0]) || blank(rest[len(rest)-1]) {
		return false
	}
	for _, b := range rest {
		switch {
		case b >= '0' && b <= '9', b == '.', b == '+', b == '-', b == 'e', b == 'E', blank(b):
		default:
			return false
		}
	}
	return true
}

// ReadPage reads one metrics page: with dialect d, or, when d is nil,
// with the dialect detected from the page, which then needs every name.
// It returns the dialect it used (nil when none was detected), and the
// sample named for its engine. Replay reads its pages here, the live
// scraper through readPage with its series cache.
func ReadPage(body []byte, d *Dialect) (sample.Server, *Dialect, error) {
	return readPage(body, d, nil)
}

func readPage(body []byte, d *Dialect, cache *seriesCache) (sample.Server, *Dialect, error) {
	var page Page
	var err error
	cached := d != nil && cache != nil
	if d != nil {
		if page, err = d.parseFiltered(body, cache); err != nil {
			err = pageError(body, err)
		}
	} else {
		page, err = ParsePage(bytes.NewReader(body))
	}
	if err != nil {
		return sample.Server{}, d, err
	}
	if d == nil {
		if d, err = Detect(page); err != nil {
			return sample.Server{}, nil, err
		}
		d.unrelay(page)
	}
	var plan *readPlan
	var values []float64
	if cached {
		plan, values = cache.planFor(d), cache.values
	}
	smp, err := d.read(page, plan, values)
	smp.Engine = d.Engine
	return smp, d, err
}

// pageError says where in the page it went wrong: the filtered parse saw
// only some of its lines, and numbered them from 1. An error, so the
// second parse costs nothing that matters.
func pageError(page []byte, err error) error {
	if _, perr := ParsePage(bytes.NewReader(page)); perr != nil {
		return perr
	}
	return err
}

// Read takes the dialect's series from a parsed page.
func (d *Dialect) Read(p Page) (sample.Server, error) { return d.read(p, nil, nil) }

// read is Read, with the plan of a scraper's series cache: followed where
// it was made on a page of this one's shape (values are the page's, by
// series.pos), else made.
func (d *Dialect) read(p Page, plan *readPlan, values []float64) (sample.Server, error) {
	var s sample.Server
	found := false
	for c := range sample.NumCounters {
		if v, model, ok := d.choose(p, int(c), d.Counters[c], false, plan, values); ok {
			s.SetCounter(c, v)
			s.Model = cmp(s.Model, model)
			// Request counts alone carry no throughput.
			found = found || c != sample.FinishedRequests && c != sample.AbortedRequests
		}
	}
	for g := range sample.NumGauges {
		if v, model, ok := d.choose(p, int(sample.NumCounters)+int(g), d.Gauges[g], g.Averaged(), plan, values); ok {
			s.SetGauge(g, v)
			s.Model = cmp(s.Model, model)
			found = true
		}
	}
	if plan != nil {
		plan.ready = true
	}
	if !found {
		return s, fmt.Errorf("%w for %s", ErrNoEngineMetrics, d.Engine)
	}
	d.readHists(p, &s, plan, values)
	return s, nil
}

// readPlan is what Read chose on a page of a scraper's series cache: for
// each counter and then each gauge, the positions of the series it summed
// and the model they named. While the cache's pages keep their shape
// (seriesCache.gen) the choices stay the same, and a page's values are
// summed at those positions with no label looked up: at one scrape a
// second those lookups, in memory gone cold since the last, were 3 % of
// the steady daemon's CPU (bench S1).
type readPlan struct {
	d     *Dialect
	gen   uint64
	lines int // the page's kept lines
	ready bool
	picks [int(sample.NumCounters) + int(sample.NumGauges)]planned
	// histsReady: hists hold readHists' choices for this shape.
	histsReady bool
	hists      [sample.NumHists]histPlan
}

type planned struct {
	ok    bool
	model string
	pos   []int32
}

// choose is pick's answer for the k-th counter or gauge: asked, or, with
// a ready plan, what it answered on the page the plan was made on, with
// this page's values.
func (d *Dialect) choose(p Page, k int, rs []Ref, average bool, plan *readPlan, values []float64) (float64, string, bool) {
	if plan == nil {
		return d.pick(p, rs, average, nil)
	}
	c := &plan.picks[k]
	if !plan.ready {
		c.pos = c.pos[:0]
		var v float64
		v, c.model, c.ok = d.pick(p, rs, average, &c.pos)
		return v, c.model, c.ok
	}
	if !c.ok {
		return 0, "", false
	}
	var sum float64
	for _, i := range c.pos {
		sum += values[i]
	}
	if average {
		sum /= float64(len(c.pos))
	}
	return sum, c.model, true
}

// planFor returns the plan to read this page with d: ready when it was
// made on a page of the same shape.
func (c *seriesCache) planFor(d *Dialect) *readPlan {
	if c.plan.d != d || c.plan.gen != c.gen || c.plan.lines != len(c.values) {
		c.plan.d, c.plan.gen, c.plan.lines, c.plan.ready, c.plan.histsReady = d, c.gen, len(c.values), false, false
	}
	return &c.plan
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// pick returns the first present ref's value: summed over label sets (or
// averaged), skipping tensor-parallel ranks other than 0. It appends the
// positions of the series it summed to pos, unless pos is nil.
func (d *Dialect) pick(p Page, rs []Ref, average bool, pos *[]int32) (float64, string, bool) {
	for _, r := range rs {
		var sum float64
		n := 0
		model := ""
	next:
		for i, s := range p[r.Name] {
			for k, v := range r.Labels {
				if s.labels[k] != v {
					continue next
				}
			}
			if rank, ok := s.labels[d.SingleRank]; d.SingleRank != "" && ok && rank != "0" {
				continue
			}
			if n > 0 && duplicate(p[r.Name][:i], s) {
				continue // the same series printed twice is one series
			}
			// NaN and Inf go through: the Guard counts and drops them.
			sum += s.value
			n++
			if pos != nil {
				*pos = append(*pos, s.pos)
			}
			for _, ml := range d.ModelLabels {
				if model == "" {
					model = s.labels[ml]
				}
			}
		}
		if n == 0 {
			continue
		}
		if average {
			sum /= float64(n)
		}
		return sum, model, true
	}
	return 0, "", false
}

// duplicate tells whether one of seen carries exactly the labels of s.
func duplicate(seen []series, s series) bool {
	for _, o := range seen {
		if len(o.labels) == len(s.labels) && maps.Equal(o.labels, s.labels) {
			return true
		}
	}
	return false
}

// Deriver turns one server's raw samples into what the joiner reads: it
// validates them first (Guard); where
// an engine has no real-time output counter, it builds one from its live
// signals (a throughput gauge, an iteration or decode counter), kept in
// step with the exact completion-time count where the engine has one, or
// else spreads completion-time counts back over the requests' durations.
// One Deriver per server.
type Deriver struct {
	guard   Guard
	prev    sample.Server
	hasPrev bool
	bridged int // samples left out in a row
	// Built counters: tokens, and the per-user speed's seconds and tokens.
	tokens, userSec, userTok float64
	rec                      reconciler
}

// reconciler keeps a live token estimate in step with an exact count that
// moves only when requests complete. The estimate says when tokens were
// made; the exact count says how many. Whatever the estimate holds beyond
// the exact count is the in-flight work; each time the server is idle
// nothing is in flight, so the offset between the two is taken again
// there. The output never falls: an estimate that ran ahead is held until
// the exact count catches up, one that fell behind jumps to it.
type reconciler struct {
	live, done float64 // accumulated estimate and exact count
	base       float64 // live - done when last idle
	out        float64
}

func (r *reconciler) add(live, done float64, idle bool) float64 {
	r.live += live
	r.done += done
	if idle {
		r.base = r.live - r.done
	}
	inflight := max(0, r.live-r.done-r.base)
	r.out = max(r.out, r.done+inflight)
	return r.out
}

// maxSpread bounds how far back completed requests' tokens are spread.
const maxSpread = time.Hour

// maxBridged is how many samples in a row that lost values are left out
// of the derivation before it goes on with what they hold (a series that
// is always broken must not stop the others).
const maxBridged = 3

// Derive validates s and completes it using the previous sample of the
// same server. A sample that lost values to the Guard is left out of the
// derivation: the next whole sample derives from the last whole one, so
// the hole is bridged, neither lost nor counted twice.
func (d *Deriver) Derive(s sample.Server) sample.Server {
	ds := d.guard.Check(&s)
	s.Discards = append(s.Discards, ds...)
	if s.Suspect {
		// Nothing is derived from counters in doubt, and the next trusted
		// sample derives from none: the span between is a hole.
		d.prev, d.hasPrev, d.bridged = sample.Server{}, false, 0
		return s
	}
	if (s.Discarded > 0 || lostLiveGauge(ds)) && !s.HasCounter[sample.GenerationTokens] && d.bridged < maxBridged {
		d.bridged++
		if s.Discarded == 0 {
			s.Discarded++ // left out: its tokens come with the next sample
		}
		return s
	}
	d.bridged = 0
	prev, ok := d.prev, d.hasPrev
	d.prev, d.hasPrev = s, true
	if s.HasCounter[sample.GenerationTokens] {
		return s
	}
	// Without a previous sample, prev is the zero Sample: it has no
	// series, and dt is 0.
	dt := 0.0
	if ok {
		dt = s.Time.Sub(prev.Time).Seconds()
	}
	if live, hasLive := d.live(&s, prev, dt); hasLive {
		d.reconcile(&s, prev, live)
		return s
	}
	spreadCompletions(&s, prev, dt)
	return s
}

// lostLiveGauge says whether a gauge that live derivation reads was
// refused; other gauges cost only themselves.
func lostLiveGauge(ds []sample.Discard) bool {
	for _, d := range ds {
		switch d.Series {
		case sample.Running.String(), sample.GenRate.String(), sample.GenRequests.String(), sample.SlotsPerDecode.String():
			return true
		}
	}
	return false
}

// live returns the tokens made since prev by the engine's live signal,
// and whether it has one: decode calls times the slots per call, a
// throughput gauge, or iterations times the generating requests.
func (d *Deriver) live(s *sample.Server, prev sample.Server, dt float64) (float64, bool) {
	switch {
	case s.HasCounter[sample.Decodes] && s.HasGauge[sample.SlotsPerDecode]:
		return decodeTokens(s, prev), true
	case s.HasGauge[sample.GenRate]:
		// The gauge keeps its last value when idle: only count it while
		// requests run.
		if dt > 0 && (!s.HasGauge[sample.Running] || s.Gauge[sample.Running] > 0) {
			return s.Gauge[sample.GenRate] * dt, true
		}
		return 0, true
	case s.HasCounter[sample.Iterations] && s.HasGauge[sample.GenRequests]:
		return d.iterationTokens(s, prev, dt), true
	}
	return 0, false
}

// decodeTokens is the growth of decode calls times busy slots per call.
func decodeTokens(s *sample.Server, prev sample.Server) float64 {
	if !prev.HasCounter[sample.Decodes] || !prev.HasGauge[sample.SlotsPerDecode] {
		return 0
	}
	cur := s.Counter[sample.Decodes] * s.Gauge[sample.SlotsPerDecode]
	if s.Counter[sample.Decodes] < prev.Counter[sample.Decodes] {
		return cur // restarted
	}
	// The gauge is printed with 6 digits: the product may dip by a
	// fraction between scrapes, which the output absorbs.
	return cur - prev.Counter[sample.Decodes]*prev.Gauge[sample.SlotsPerDecode]
}

// iterationTokens is iterations times the requests generating in them;
// the iteration rate while any generate is also the per-user speed, given
// to s where the engine has no inter-token latency of its own.
func (d *Deriver) iterationTokens(s *sample.Server, prev sample.Server, dt float64) float64 {
	live := 0.0
	if dt > 0 && prev.HasCounter[sample.Iterations] {
		iters := increase(prev.Counter[sample.Iterations], s.Counter[sample.Iterations])
		gen := (prev.Gauge[sample.GenRequests] + s.Gauge[sample.GenRequests]) / 2
		live = iters * gen
		if gen > 0 {
			d.userTok += iters
			d.userSec += dt
		}
	}
	if !s.HasCounter[sample.ITLSum] {
		s.SetCounter(sample.ITLSum, d.userSec)
		s.SetCounter(sample.ITLCount, d.userTok)
	}
	return live
}

// reconcile builds s's output counter from the live tokens, kept in step
// with the completion-time count where the engine has one.
func (d *Deriver) reconcile(s *sample.Server, prev sample.Server, live float64) {
	if s.HasCounter[sample.CompletionTokens] {
		done := 0.0
		if prev.HasCounter[sample.CompletionTokens] {
			done = increase(prev.Counter[sample.CompletionTokens], s.Counter[sample.CompletionTokens])
		}
		idle := s.HasGauge[sample.Running] && s.Gauge[sample.Running] == 0
		d.tokens = d.rec.add(live, done, idle)
	} else {
		d.tokens += max(0, live)
	}
	s.SetCounter(sample.GenerationTokens, d.tokens)
	s.Derived[sample.GenerationTokens] = true
}

// spreadCompletions spreads the tokens of the requests completed since
// prev back over their mean duration (bounded by maxSpread), for engines
// with no live signal.
func spreadCompletions(s *sample.Server, prev sample.Server, dt float64) {
	if !s.HasCounter[sample.CompletionTokens] || !prev.HasCounter[sample.CompletionTokens] {
		return
	}
	tok := increase(prev.Counter[sample.CompletionTokens], s.Counter[sample.CompletionTokens])
	if tok <= 0 {
		return
	}
	spread := time.Duration(dt * float64(time.Second))
	if s.HasCounter[sample.CompletionSeconds] && prev.HasCounter[sample.CompletionSeconds] {
		secs := increase(prev.Counter[sample.CompletionSeconds], s.Counter[sample.CompletionSeconds])
		reqs := 0.0
		if s.HasCounter[sample.CompletionRequests] && prev.HasCounter[sample.CompletionRequests] {
			reqs = increase(prev.Counter[sample.CompletionRequests], s.Counter[sample.CompletionRequests])
		} else if s.HasGauge[sample.Running] || prev.HasGauge[sample.Running] {
			// Summed per-slot seconds of concurrent requests: divide by
			// how many ran side by side.
			reqs = math.Max(prev.Gauge[sample.Running], s.Gauge[sample.Running])
		}
		spread = time.Duration(secs / math.Max(1, reqs) * float64(time.Second))
	}
	spread = min(max(spread, 0), maxSpread)
	iv := sample.Unknown(s.Time.Add(-spread), s.Time)
	iv.Tokens = tok
	s.Intervals = append(s.Intervals, iv)
}

// increase is a counter's growth, the new value after a reset.
func increase(old, cur float64) float64 {
	if cur < old {
		return cur
	}
	return cur - old
}
