package collector

import (
	"errors"
	"fmt"
	"io"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Dialect says which exposed metric names carry each series for one engine.
// Names are tried in order; the first present wins, so list the newest
// name first. Samples of one name are summed over label sets
// (data-parallel engines are one server), except KV usage, which is a ratio
// and is averaged.
type Dialect struct {
	Engine   string
	Counters [NumCounters][]string
	Gauges   [NumGauges][]string
	// ModelLabel names the label that carries the served model.
	ModelLabel string
}

// prefixed returns each name with and without prefix: NIM serves vLLM's
// series without the "vllm:" prefix.
func prefixed(prefix string, names ...string) []string {
	out := make([]string, 0, 2*len(names))
	for _, n := range names {
		out = append(out, prefix+n)
	}
	return append(out, names...)
}

// VLLM reads vLLM V0 and V1 (and NIM's unprefixed copy of the same names).
// Inter-token latency comes from inter_token_latency_seconds (0.11+), else
// from time_per_output_token_seconds, which held the same quantity before.
var VLLM = Dialect{
	Engine: "vllm",
	Counters: [NumCounters][]string{
		GenerationTokens: prefixed("vllm:", "generation_tokens_total"),
		PromptTokens:     prefixed("vllm:", "prompt_tokens_total"),
		Preemptions:      prefixed("vllm:", "num_preemptions_total"),
		ITLSum:           prefixed("vllm:", "inter_token_latency_seconds_sum", "time_per_output_token_seconds_sum"),
		ITLCount:         prefixed("vllm:", "inter_token_latency_seconds_count", "time_per_output_token_seconds_count"),
	},
	Gauges: [NumGauges][]string{
		Running: prefixed("vllm:", "num_requests_running"),
		Waiting: prefixed("vllm:", "num_requests_waiting"),
		KVUsage: prefixed("vllm:", "kv_cache_usage_perc", "gpu_cache_usage_perc"),
	},
	ModelLabel: "model_name",
}

// series is the aggregate of one exposed name over its label sets.
type series struct {
	sum   float64
	n     int
	model string
}

// Parse reads one metrics page in the Prometheus text format.
func (d *Dialect) Parse(r io.Reader) (Sample, error) {
	var s Sample
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	flat := flatten(fams, d.ModelLabel)
	found := false
	pick := func(names []string) (series, bool) {
		for _, n := range names {
			if v, ok := flat[n]; ok {
				return v, true
			}
		}
		return series{}, false
	}
	for c := range NumCounters {
		if v, ok := pick(d.Counters[c]); ok {
			s.SetCounter(c, v.sum)
			if s.Model == "" {
				s.Model = v.model
			}
			found = true
		}
	}
	for g := range NumGauges {
		if v, ok := pick(d.Gauges[g]); ok {
			val := v.sum
			if g == KVUsage && v.n > 0 {
				val /= float64(v.n)
			}
			s.SetGauge(g, val)
			if s.Model == "" {
				s.Model = v.model
			}
			found = true
		}
	}
	if !found {
		return s, fmt.Errorf("%w for %s", ErrNoEngineMetrics, d.Engine)
	}
	return s, nil
}

// flatten turns metric families into one aggregate per exposed name.
// Histograms and summaries expose name_sum and name_count; excerpts without
// TYPE lines already arrive as untyped families with those suffixes.
func flatten(fams map[string]*dto.MetricFamily, modelLabel string) map[string]series {
	out := make(map[string]series, len(fams))
	add := func(name string, m *dto.Metric, v float64) {
		s := out[name]
		s.sum += v
		s.n++
		if s.model == "" {
			for _, l := range m.GetLabel() {
				if l.GetName() == modelLabel {
					s.model = l.GetValue()
				}
			}
		}
		out[name] = s
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				add(name, m, m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				add(name+"_sum", m, m.GetHistogram().GetSampleSum())
				add(name+"_count", m, float64(m.GetHistogram().GetSampleCount()))
			case dto.MetricType_SUMMARY:
				add(name+"_sum", m, m.GetSummary().GetSampleSum())
				add(name+"_count", m, float64(m.GetSummary().GetSampleCount()))
			default:
				add(name, m, m.GetUntyped().GetValue())
			}
		}
	}
	return out
}

// StripSource drops the "# source:" provenance lines of tpsmon's fixtures.
func StripSource(text string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		if !strings.HasPrefix(l, "# source:") {
			b.WriteString(l)
		}
	}
	return b.String()
}

// ErrUnknownEngine marks an engine name tpsmon has no metrics dialect for.
var ErrUnknownEngine = errors.New("unknown engine")

// DialectFor returns the dialect of an engine name. NIM for LLMs serves
// vLLM's series; "auto" reads them too until detection knows more engines.
func DialectFor(engine string) (*Dialect, error) {
	switch engine {
	case "vllm", "nim", "auto":
		return &VLLM, nil
	}
	return nil, fmt.Errorf("%w %q (this build reads: auto, vllm, nim)", ErrUnknownEngine, engine)
}
