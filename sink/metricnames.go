package sink

import (
	"strings"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
)

// WindowMetric is how a numeric-profile field of a window is named where
// Prometheus-model stores read it: the gauges on /metrics
// (http.window_metrics) and the OTLP push (sink/otlp) take their names
// from here, so that both paths give a store the same series.
type WindowMetric struct {
	metricName
	measurement, labelKey string
}

// metricName is a field's entry in windowMetricNames.
type metricName struct {
	// name follows tpsmon_window_<server|gpu>_ (FullName); help says what
	// it holds.
	name, help string
	// scale takes the field to the name's unit (0: 1).
	scale float64
	// label is a one-hot field's value of its label (LabelKey); "" for
	// the others.
	label string
}

// Labels of the one-hot fields.
const (
	LabelState = "state"
	LabelRule  = "rule"
)

// WindowMetricOf returns the name of a numeric field of measurement, and
// false for a field that has none.
func WindowMetricOf(measurement, field string) (WindowMetric, bool) {
	n, ok := windowMetricNames[measurement][field]
	if !ok {
		return WindowMetric{}, false
	}
	return WindowMetric{n, measurement, labelKeyOf(field, n.label)}, true
}

// WindowMetricFields lists the named fields of measurement.
func WindowMetricFields(measurement string) []string {
	out := make([]string, 0, len(windowMetricNames[measurement]))
	for f := range windowMetricNames[measurement] {
		out = append(out, f)
	}
	return out
}

func labelKeyOf(field, value string) string {
	switch {
	case value == "":
		return ""
	case strings.HasPrefix(field, schema.FieldSuspect+"_"):
		return LabelRule
	}
	return LabelState
}

// FullName is the metric's name: tpsmon_window_server_... or
// tpsmon_window_gpu_....
func (m WindowMetric) FullName() string {
	return "tpsmon_window_" + strings.TrimPrefix(m.measurement, "tpsmon_") + "_" + m.name
}

// Help says what the metric holds.
func (m WindowMetric) Help() string { return m.help }

// Value is the field's value v in the name's unit.
func (m WindowMetric) Value(v float64) float64 {
	if m.scale != 0 {
		return v * m.scale
	}
	return v
}

// Scale is what Value multiplies by: the name's unit over the field's.
func (m WindowMetric) Scale() float64 { return m.Value(1) }

// Label is the label a one-hot field adds to its point's tags and the
// value it gives it ("state", "idle"); both "" for other fields.
func (m WindowMetric) Label() (key, value string) { return m.labelKey, m.label }

// windowMetricNames names every numeric field of the points, per
// measurement. TestWindowMetricsNameEveryField (daemon/agent) fails on a
// field the points carry that has no name here.
var windowMetricNames = map[string]map[string]metricName{
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
	srv := windowMetricNames[schema.Server]
	srv[schema.FieldLatencySourceCode] = metricName{"latency_source_code", "Where the latency came from: 1 requests (exact), 2 histogram (interpolated).", 0, ""}
	srv[schema.FieldTTFTBasisCode] = metricName{"ttft_basis_code", "From when the TTFT of per-request log lines counts: 1 prefill only, 2 the slot's taking the request, 3 the HTTP handler's.", 0, ""}
	srv[schema.FieldLatencyReasonCode] = metricName{"latency_reason_code", "1: the engine's histograms gave no latency (the reason is in the InfluxDB point).", 0, ""}
	srv[schema.FieldSLOMissPhaseCode] = metricName{"slo_miss_phase_code", "Where the time of requests under the floor went: 1 queue, 2 prefill, 3 decode.", 0, ""}
	srv[schema.FieldSLORequests] = metricName{"slo_requests", "Requests the SLO attainment is over.", 0, ""}
	srv[schema.FieldGoodputTPS] = metricName{"goodput_tokens_per_second", "Output tokens per second of requests that met the objectives.", 0, ""}
	for _, f := range []string{schema.FieldSLOAttainment, schema.FieldSLOAttainmentLo, schema.FieldSLOAttainmentHi} {
		srv[f] = metricName{f + "_ratio", "Share of the window's requests that met every objective (_lo, _hi: its bounds).", 0, ""}
	}
	for _, f := range []string{schema.FieldGoodputRPS, schema.FieldGoodputRPSLo, schema.FieldGoodputRPSHi} {
		srv[f] = metricName{strings.Replace(f, "rps", "requests_per_second", 1), "Requests per second that met the objectives (_lo, _hi: its bounds).", 0, ""}
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
			srv[f] = metricName{name, "Latency quantile of the window's requests (analysis/latency; _lo, _hi: its histogram bucket's bounds).", 0, ""}
		}
	}
	for _, s := range schema.States {
		windowMetricNames[schema.Server][schema.NumericField(schema.FieldState, s)] = metricName{
			"state", "1 for the window's state, 0 for the others.", 0, s}
	}
	for _, r := range analysis.Rules {
		windowMetricNames[schema.Server][schema.NumericField(schema.FieldSuspect, r)] = metricName{
			"suspect", "1 for each sanity rule that doubts the window (where any does).", 0, r}
	}
}
