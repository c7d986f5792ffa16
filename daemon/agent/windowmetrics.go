package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

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
// times their fields (about 40 a server with its states and rules, 20 a
// GPU). It is an output of the pipeline: the metrics are built when a
// window closes, and a scrape sends them as they are.
type windowMetrics struct {
	mu      sync.Mutex
	metrics []prometheus.Metric
	descs   map[string]*prometheus.Desc
}

func newWindowMetrics() *windowMetrics { return &windowMetrics{descs: map[string]*prometheus.Desc{}} }

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

// Describe sends nothing: the label sets follow the fields present, so
// the collector is unchecked (the registry still checks what it gathers).
func (wm *windowMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect sends the last closed window's metrics.
func (wm *windowMetrics) Collect(ch chan<- prometheus.Metric) {
	wm.mu.Lock()
	ms := wm.metrics
	wm.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
}

// WriteWindows keeps the metrics of the last of cs; a server or GPU whose
// window has a string value without a code is left out and named in the
// error.
func (wm *windowMetrics) WriteWindows(cs []analysis.Closed) error {
	if len(cs) == 0 {
		return nil
	}
	c := &cs[len(cs)-1]
	var ms []prometheus.Metric
	var errs []error
	for i := range c.GPUs {
		g := &c.GPUs[i]
		fs, err := sink.NumericGPUFields(*g)
		if err != nil {
			errs = append(errs, fmt.Errorf("window metrics of gpu %s: %w", g.Label, err))
			continue
		}
		ms = wm.appendPoint(ms, sink.GPUPoint(*g), fs)
	}
	for i := range c.Servers {
		s := &c.Servers[i]
		fs, err := sink.NumericServerFields(*s)
		if err != nil {
			errs = append(errs, fmt.Errorf("window metrics of server %s: %w", s.Server, err))
			continue
		}
		ms = wm.appendPoint(ms, sink.ServerPoint(*s), fs)
	}
	wm.mu.Lock()
	wm.metrics = ms
	wm.mu.Unlock()
	// A window without a numeric form is left out, the others served.
	return errors.Join(errs...)
}

// appendPoint appends the gauges of one window's point, fields fs.
func (wm *windowMetrics) appendPoint(ms []prometheus.Metric, p sink.Point, fs []sink.Field) []prometheus.Metric {
	names := make([]string, len(p.Tags), len(p.Tags)+1)
	values := make([]string, len(p.Tags), len(p.Tags)+1)
	for i, t := range p.Tags {
		names[i], values[i] = t.Key, sink.TagValue(t.Value)
	}
	for _, f := range fs {
		m, ok := promNames[p.Measurement][f.Key]
		if !ok {
			continue // a field without a name yet: the test says so
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
		if m.scale != 0 {
			v *= m.scale
		}
		ln, lv := names, values
		if m.label != "" {
			key := labelState
			if strings.HasPrefix(f.Key, schema.FieldSuspect+"_") {
				key = labelRule
			}
			ln, lv = append(slices.Clip(names), key), append(slices.Clip(values), m.label)
		}
		cm, err := prometheus.NewConstMetric(wm.desc(promName(p.Measurement, m), m.help, ln), prometheus.GaugeValue, v, lv...)
		if err != nil {
			continue // not a label set a name can carry: the registry would refuse the scrape
		}
		ms = append(ms, prometheus.NewMetricWithTimestamp(p.Time, cm))
	}
	return ms
}

// desc returns the Desc of a name and label set, made once.
func (wm *windowMetrics) desc(name, help string, labels []string) *prometheus.Desc {
	key := name + "\x00" + strings.Join(labels, ",")
	if d, ok := wm.descs[key]; ok {
		return d
	}
	d := prometheus.NewDesc(name, help, labels, nil)
	wm.descs[key] = d
	return d
}
