package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
)

// windowMetrics serves the last closed window of every server and GPU on
// /metrics (http.window_metrics): one gauge per field of the numeric
// profile (sink.NumericServerFields), named by promName, labelled with
// the point's tags (cut as the sink cuts them), stamped with the window's
// start. The series are those of the last closed window only: a server or
// GPU that leaves the configuration, or is no longer discovered, has no
// window and so no series. Cardinality is the servers' and GPUs' count
// times their fields (up to 94 a server with its states, rules and latency, 19 a
// GPU). It is an output of the pipeline: it keeps the fields when a
// window closes, and the first scrape after makes the gauges.
type windowMetrics struct {
	descs map[string]map[string]gauge // by measurement and field; read only
	mu    sync.Mutex
	// points are the last closed window's, count their fields; metrics
	// their gauges once a scrape made them, nil before.
	points  []wmPoint
	count   int
	metrics []prometheus.Metric
}

func newWindowMetrics() *windowMetrics { return &windowMetrics{descs: newDescs()} }

// promMetric is how a numeric field is served: its name after
// tpsmon_window_<server|gpu>_, its help, a scale to the name's unit (0:
// 1), and for a one-hot field the label that names its value.
type promMetric struct {
	name, help string
	scale      float64
	label      string
}

// Labels of the one-hot fields.
const (
	labelState = "state"
	labelRule  = "rule"
)

// promNames names every numeric field of the points on /metrics, per
// measurement. TestWindowMetricsNameEveryField fails on a field the points
// carry that has no name here.
var promNames = map[string]map[string]promMetric{
	schema.Server: {
		schema.FieldCeilingFindingCode:   {"ceiling_finding_code", "What the MBU says: 1 near_ceiling, 2 demand_bound, 3 host_bound.", 0, ""},
		schema.FieldCeilingTPS:           {"ceiling_tokens_per_second", "System tokens per second the GPUs could give (decode ceiling).", 0, ""},
		schema.FieldCoverage:             {"coverage_ratio", "Fraction of the window with data.", 0, ""},
		schema.FieldDecodeStepsPerS:      {"decode_steps_per_second", "The engine's decode steps per second.", 0, ""},
		schema.FieldMBU:                  {"memory_bandwidth_utilization_ratio", "Bytes the decode steps read over the GPUs' peak bandwidth.", 0, ""},
		schema.FieldEnergyJ:              {"energy_joules", "Energy of the server's GPUs over the window.", 0, ""},
		schema.FieldGPUUtil:              {"gpu_utilization_percent", "Mean NVML utilization of the server's GPUs.", 0, ""},
		schema.FieldGPUUtilMax:           {"gpu_utilization_max_percent", "Highest NVML utilization of the server's GPUs.", 0, ""},
		schema.FieldKVCacheUsage:         {"kv_cache_usage_ratio", "Mean KV cache usage.", 0, ""},
		schema.FieldMemTotalBytes:        {"memory_total_bytes", "GPU memory of the server's GPUs.", 0, ""},
		schema.FieldMemUsedBytes:         {"memory_used_bytes", "GPU memory used on the server's GPUs.", 0, ""},
		schema.FieldPerUserTPS:           {"per_user_tokens_per_second", "Output tokens per second one stream sees.", 0, ""},
		schema.FieldPowerW:               {"power_watts", "Mean power of the server's GPUs.", 0, ""},
		schema.FieldPreemptions:          {"preemptions", "Requests preempted in the window.", 0, ""},
		schema.FieldPrefixHitRate:        {"prefix_hit_ratio", "Prompt tokens served from the prefix cache, token-weighted.", 0, ""},
		schema.FieldPromptCachedTokens:   {"prompt_cached_tokens", "Prompt tokens hit in the prefix cache in the window.", 0, ""},
		schema.FieldPromptComputedTokens: {"prompt_computed_tokens", "Prompt tokens computed by prefill in the window.", 0, ""},
		schema.FieldPromptExternalTokens: {"prompt_external_tokens", "Prompt tokens whose KV came from another instance in the window.", 0, ""},
		schema.FieldPromptTokens:         {"prompt_tokens", "Prompt tokens in the window.", 0, ""},
		schema.FieldPromptTPS:            {"prompt_tokens_per_second", "Prefill tokens per second.", 0, ""},
		schema.FieldRunning:              {"running_requests", "Mean requests running.", 0, ""},
		schema.FieldSMActive:             {"sm_active_percent", "Mean SM activity of the server's GPUs (GPM).", 0, ""},
		schema.FieldSourceCode:           {"source_code", "Where the tokens were read: 1 metrics, 2 log.", 0, ""},
		schema.FieldSpecAcceptRate:       {"spec_accept_ratio", "Accepted over drafted speculative tokens.", 0, ""},
		schema.FieldSpecFindingCode:      {"spec_finding_code", "Speculation finding: 0 none, 1 spec_ineffective.", 0, ""},
		schema.FieldStateCode:            {"state_code", "The window's state as its code (schema.StateCodes).", 0, ""},
		schema.FieldSystemTPS:            {"system_tokens_per_second", "Output tokens per second of the server.", 0, ""},
		schema.FieldTokens:               {"tokens", "Output tokens in the window.", 0, ""},
		schema.FieldTokensPerJoule:       {"tokens_per_joule", "Output tokens per joule of the server's GPUs.", 0, ""},
		schema.FieldTokensPerStep:        {"tokens_per_step", "Tokens per speculative verification step.", 0, ""},
		schema.FieldTPSPerGPU:            {"tokens_per_second_per_gpu", "System tokens per second over the server's GPUs.", 0, ""},
		schema.FieldWaiting:              {"waiting_requests", "Mean requests waiting.", 0, ""},
		schema.FieldWindowS:              {"window_seconds", "The window's length.", 0, ""},
	},
	schema.GPU: {
		schema.FieldCoverage:         {"coverage_ratio", "Fraction of the window with samples.", 0, ""},
		schema.FieldDRAMActive:       {"dram_active_percent", "Mean DRAM activity (GPM).", 0, ""},
		schema.FieldEnergyJ:          {"energy_joules", "Energy over the window.", 0, ""},
		schema.FieldEnergySourceCode: {"energy_source_code", "Where the energy came from: 1 counter, 2 power.", 0, ""},
		schema.FieldErrorCode:        {"read_error", "1: the GPU could not be read in the window.", 0, ""},
		schema.FieldMemTotalBytes:    {"memory_total_bytes", "GPU memory.", 0, ""},
		schema.FieldMemUsedBytes:     {"memory_used_bytes", "GPU memory used.", 0, ""},
		schema.FieldMemUtil:          {"memory_utilization_percent", "Mean NVML memory utilization.", 0, ""},
		schema.FieldPowerW:           {"power_watts", "Mean power.", 0, ""},
		schema.FieldSamples:          {"samples", "Samples read in the window.", 0, ""},
		schema.FieldSMActive:         {"sm_active_percent", "Mean SM activity (GPM).", 0, ""},
		schema.FieldSMClockMHz:       {"sm_clock_hertz", "Mean SM clock.", 1e6, ""},
		schema.FieldSMOccupancy:      {"sm_occupancy_percent", "Mean SM occupancy (GPM).", 0, ""},
		schema.FieldTempC:            {"temperature_celsius", "Highest temperature.", 0, ""},
		schema.FieldTensorActive:     {"tensor_active_percent", "Mean tensor core activity (GPM).", 0, ""},
		schema.FieldThrottle:         {"throttle_reasons", "NVML throttle reasons, OR over the window (bitmask).", 0, ""},
		schema.FieldUtil:             {"utilization_percent", "Mean NVML utilization.", 0, ""},
		schema.FieldUtilMax:          {"utilization_max_percent", "Highest NVML utilization.", 0, ""},
		schema.FieldWindowS:          {"window_seconds", "The window's length.", 0, ""},
	},
}

func init() {
	srv := promNames[schema.Server]
	srv[schema.FieldLatencySourceCode] = promMetric{"latency_source_code", "Where the latency came from: 1 requests (exact), 2 histogram (interpolated).", 0, ""}
	srv[schema.FieldTTFTBasisCode] = promMetric{"ttft_basis_code", "From when the TTFT of per-request log lines counts: 1 prefill only, 2 the slot's taking the request, 3 the HTTP handler's.", 0, ""}
	srv[schema.FieldLatencyReasonCode] = promMetric{"latency_reason_code", "1: the engine's histograms gave no latency (the reason is in the InfluxDB point).", 0, ""}
	srv[schema.FieldSLOMissPhaseCode] = promMetric{"slo_miss_phase_code", "Where the time of requests under the floor went: 1 queue, 2 prefill, 3 decode.", 0, ""}
	srv[schema.FieldSLORequests] = promMetric{"slo_requests", "Requests the SLO attainment is over.", 0, ""}
	srv[schema.FieldGoodputTPS] = promMetric{"goodput_tokens_per_second", "Output tokens per second of requests that met the objectives.", 0, ""}
	for _, f := range []string{schema.FieldSLOAttainment, schema.FieldSLOAttainmentLo, schema.FieldSLOAttainmentHi} {
		srv[f] = promMetric{f + "_ratio", "Share of the window's requests that met every objective (_lo, _hi: its bounds).", 0, ""}
	}
	for _, f := range []string{schema.FieldGoodputRPS, schema.FieldGoodputRPSLo, schema.FieldGoodputRPSHi} {
		srv[f] = promMetric{strings.Replace(f, "rps", "requests_per_second", 1), "Requests per second that met the objectives (_lo, _hi: its bounds).", 0, ""}
	}
	// Quantiles and their bucket bounds: seconds, or one request's tokens
	// per second.
	for _, q := range schema.LatencyQuantileFields {
		for _, f := range []string{q, schema.LoField(q), schema.HiField(q)} {
			name, ok := strings.CutSuffix(f, "_s")
			if ok {
				name += "_seconds"
			} else {
				name = strings.Replace(name, "per_user_tps", "per_user_tokens_per_second", 1)
			}
			srv[f] = promMetric{name, "Latency quantile of the window's requests (analysis/latency; _lo, _hi: its histogram bucket's bounds).", 0, ""}
		}
	}
	for _, s := range schema.States {
		promNames[schema.Server][schema.NumericField(schema.FieldState, s)] = promMetric{
			"state", "1 for the window's state, 0 for the others.", 0, s}
	}
	for _, r := range analysis.Rules {
		promNames[schema.Server][schema.NumericField(schema.FieldSuspect, r)] = promMetric{
			"suspect", "1 for each sanity rule that doubts the window (where any does).", 0, r}
	}
}

// promName is the metric's full name on /metrics.
func promName(measurement string, m promMetric) string {
	return "tpsmon_window_" + strings.TrimPrefix(measurement, "tpsmon_") + "_" + m.name
}

// wmPoint is one window's point as the gauges need it: its tag values in
// the order of its measurement's label names, its start and its numeric
// fields.
type wmPoint struct {
	measurement string
	labels      []string
	start       time.Time
	fields      []sink.Field
}

// Describe sends the Desc of every named field.
func (wm *windowMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, gs := range wm.descs {
		for _, g := range gs {
			ch <- g.desc
		}
	}
}

// Collect sends the last closed window's gauges, made at the first scrape
// after it closed: a daemon nobody scrapes pays only for keeping the
// window's fields.
func (wm *windowMetrics) Collect(ch chan<- prometheus.Metric) {
	wm.mu.Lock()
	if wm.metrics == nil {
		wm.metrics = make([]prometheus.Metric, 0, wm.count)
		for _, p := range wm.points {
			wm.metrics = wm.appendPoint(wm.metrics, p)
		}
	}
	ms := wm.metrics
	wm.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
}

// WriteWindows keeps the fields of the last of cs; a server or GPU whose
// window has a string value without a code is left out and named in the
// error.
func (wm *windowMetrics) WriteWindows(cs []analysis.Closed) error {
	if len(cs) == 0 {
		return nil
	}
	c := &cs[len(cs)-1]
	points := make([]wmPoint, 0, len(c.GPUs)+len(c.Servers))
	count := 0
	var errs []error
	add := func(measurement string, tags []sink.Tag, start time.Time, fs []sink.Field) {
		p := wmPoint{measurement: measurement, labels: make([]string, len(tags)), start: start, fields: fs}
		for i, t := range tags {
			p.labels[i] = sink.TagValue(t.Value)
		}
		points, count = append(points, p), count+len(fs)
	}
	for i := range c.GPUs {
		g := &c.GPUs[i]
		fs, err := sink.NumericGPUFields(*g)
		if err != nil {
			errs = append(errs, fmt.Errorf("window metrics of gpu %s: %w", g.Label, err))
			continue
		}
		add(schema.GPU, sink.GPUTags(*g), g.Start, fs)
	}
	for i := range c.Servers {
		s := &c.Servers[i]
		fs, err := sink.NumericServerFields(*s)
		if err != nil {
			errs = append(errs, fmt.Errorf("window metrics of server %s: %w", s.Server, err))
			continue
		}
		add(schema.Server, sink.ServerTags(*s), s.Start, fs)
	}
	wm.mu.Lock()
	wm.points, wm.count, wm.metrics = points, count, nil
	wm.mu.Unlock()
	// A window without a numeric form is left out, the others served.
	return errors.Join(errs...)
}

// appendPoint appends the gauges of one window's point.
func (wm *windowMetrics) appendPoint(ms []prometheus.Metric, p wmPoint) []prometheus.Metric {
	for _, f := range p.fields {
		d, ok := wm.descs[p.measurement][f.Key]
		if !ok {
			continue // a field without a name yet: TestWindowMetricsNameEveryField says so
		}
		var v float64
		switch x := f.Value.(type) {
		case float64:
			v = x
		case int64:
			v = float64(x)
		default:
			continue
		}
		if d.scale != 0 {
			v *= d.scale
		}
		lv := p.labels
		if d.value != "" {
			lv = append(slices.Clip(lv), d.value)
		}
		cm, err := prometheus.NewConstMetric(d.desc, prometheus.GaugeValue, v, lv...)
		if err != nil {
			continue // not a label set the name carries: the registry would refuse the scrape
		}
		ms = append(ms, prometheus.NewMetricWithTimestamp(p.start, cm))
	}
	return ms
}

// gauge is a field's Desc, its scale and its one-hot label value.
type gauge struct {
	desc  *prometheus.Desc
	scale float64
	value string
}

// newDescs makes the Desc of every named field: labelled with its
// measurement's tags in the points' order (sorted), and a one-hot field
// with its label after them.
func newDescs() map[string]map[string]gauge {
	tags := map[string][]string{
		schema.Server: slices.Sorted(slices.Values(schema.ServerTags)),
		schema.GPU:    slices.Sorted(slices.Values(schema.GPUTags)),
	}
	out := map[string]map[string]gauge{}
	for measurement, names := range promNames {
		out[measurement] = map[string]gauge{}
		for field, m := range names {
			labels := tags[measurement]
			if m.label != "" {
				key := labelState
				if strings.HasPrefix(field, schema.FieldSuspect+"_") {
					key = labelRule
				}
				labels = append(slices.Clip(labels), key)
			}
			out[measurement][field] = gauge{prometheus.NewDesc(promName(measurement, m), m.help, labels, nil), m.scale, m.label}
		}
	}
	return out
}
