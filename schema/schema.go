// Package schema names what tpsmon writes to InfluxDB: the measurements,
// their tags and fields, and the states of a server window (design §4 and
// §5). The joiner, the outputs, the report and the dashboard generator all
// take the names from here, so a rename is one edit and a typo a compile
// error.
package schema

import "strings"

// Measurements.
const (
	// Server is one point per server per window: the joined series.
	Server = "tpsmon_server"
	// GPU is one point per GPU (or MIG instance) per window.
	GPU = "tpsmon_gpu"
)

// Tags.
const (
	TagHost   = "host"
	TagServer = "server" // on GPU points: the server using the GPU, empty when none
	TagEngine = "engine"
	// TagEngineVersion is the engine's version where its log or metrics
	// state one (absent otherwise).
	TagEngineVersion = "engine_version"
	TagModel         = "model"
	TagGPUs          = "gpus" // comma-joined GPU labels of a server
	TagGPU           = "gpu"  // GPU index, or index/instance for MIG ("0/gi1")
	TagUUID          = "uuid"
	TagName          = "name" // GPU product name
)

// Fields. Units are in the names: percentages are 0..100, ratios 0..1.
const (
	// tpsmon_server only.
	FieldTokens         = "tokens" // int
	FieldSystemTPS      = "system_tps"
	FieldPerUserTPS     = "per_user_tps"
	FieldPromptTokens   = "prompt_tokens" // int
	FieldPromptTPS      = "prompt_tps"
	FieldRunning        = "running"
	FieldWaiting        = "waiting"
	FieldKVCacheUsage   = "kv_cache_usage"
	FieldPreemptions    = "preemptions" // int
	FieldGPUUtil        = "gpu_util"
	FieldGPUUtilMax     = "gpu_util_max"
	FieldTokensPerJoule = "tokens_per_joule"
	FieldTPSPerGPU      = "tps_per_gpu"
	FieldState          = "state"  // string, one of States
	FieldSource         = "source" // string: SourceMetrics or SourceLog
	// The decode ceiling (analysis/roofline): the engine's own decode
	// steps per second, the model bandwidth utilization (bytes the steps
	// read over the GPUs' peak; may exceed 1 when a fact is wrong) and the
	// system tokens/s the hardware could give at the window's running
	// requests and KV occupancy. Absent when a fact is missing.
	FieldDecodeStepsPerS = "decode_steps_per_s"
	FieldMBU             = "mbu"
	FieldCeilingTPS      = "ceiling_tps"
	// FieldCeilingFinding is what the MBU says (string): near_ceiling,
	// demand_bound or host_bound (analysis.Finding).
	FieldCeilingFinding = "ceiling_finding"
	// The prompt's split by where its KV came from (ints): computed by
	// prefill, hit in the local prefix cache, transferred from another
	// instance; they add up to all the window's prompt tokens. prefix_hit_rate
	// is cached ÷ all, token-weighted. Absent where the engine does not
	// split. Where it does, prompt_tps is the computed prefill rate (before,
	// and still without the split: the rate of all prompt tokens, cached
	// ones included).
	FieldPromptComputedTokens = "prompt_computed_tokens"
	FieldPromptCachedTokens   = "prompt_cached_tokens"
	FieldPromptExternalTokens = "prompt_external_tokens"
	FieldPrefixHitRate        = "prefix_hit_rate"
	// Speculative decoding: accepted ÷ drafted tokens, tokens per
	// verification step, and spec_finding (string): spec_ineffective when
	// acceptance is under the spec_accept threshold, else empty.
	FieldSpecAcceptRate = "spec_accept_rate"
	FieldTokensPerStep  = "tokens_per_step"
	FieldSpecFinding    = "spec_finding"
	// FieldSuspect (string) names the sanity rules that fired in the
	// window, comma-joined (analysis.Rules); absent when none did. The
	// window's values are written as read all the same.
	FieldSuspect = "suspect"

	// Both measurements.
	FieldSMActive      = "sm_active"
	FieldMemUsedBytes  = "mem_used_bytes"  // int
	FieldMemTotalBytes = "mem_total_bytes" // int
	FieldPowerW        = "power_w"
	FieldEnergyJ       = "energy_j"
	FieldCoverage      = "coverage"
	// FieldWindowS is the window's length in seconds: readers turn windows
	// into time with it (points written before it existed lack it).
	FieldWindowS = "window_s"

	// tpsmon_gpu only.
	FieldUtil         = "util"
	FieldUtilMax      = "util_max"
	FieldMemUtil      = "mem_util"
	FieldEnergySource = "energy_source" // string: EnergyCounter or EnergyPower
	FieldSMOccupancy  = "sm_occupancy"
	FieldTensorActive = "tensor_active"
	FieldDRAMActive   = "dram_active"
	FieldTempC        = "temp_c"
	FieldSMClockMHz   = "sm_clock_mhz"
	FieldThrottle     = "throttle" // int bitmask, OR over the window
	FieldSamples      = "samples"  // int
	FieldError        = "error"    // string, when the GPU could not be read
)

// What one user feels (package analysis/latency), on tpsmon_server points
// where the engine gives it. Seconds, quantiles of the requests (or token
// gaps) observed in the window. From histograms (latency_source
// "histogram") a quantile is interpolated in its bucket and <name>_lo,
// <name>_hi are the bucket's edges (equal when the quantile falls on an
// edge: exact; _hi absent past the last finite edge, where the value is
// absent too). From per-request lines ("requests") every value is exact.
const (
	FieldLatencySource = "latency_source" // string: "requests" or "histogram"
	// FieldLatencyReason says why the engine's histograms gave no number
	// (string: a counter reset, buckets that changed, counters in doubt).
	FieldLatencyReason = "latency_reason"
	// FieldTTFTBasis says from when the TTFT of per-request lines counts
	// (string): "http", the server's HTTP handler taking the request
	// (llama.cpp -lv 4 with its stamps); "slot", its loop taking it into a
	// slot (llama.cpp's stamps); "prefill", the prompt's evaluation only
	// (no stamps, or Ollama's bare relayed lines). The narrowest of the
	// window's requests; absent from histograms.
	FieldTTFTBasis = "ttft_basis"
	FieldTTFTP50   = "ttft_p50_s"
	FieldTTFTP90   = "ttft_p90_s"
	FieldTTFTP99   = "ttft_p99_s"
	FieldITLP50    = "itl_p50_s"
	FieldITLP90    = "itl_p90_s"
	FieldITLP99    = "itl_p99_s"
	FieldE2EP50    = "e2e_p50_s"
	FieldE2EP99    = "e2e_p99_s"
	FieldQueueP50  = "queue_p50_s"
	FieldQueueP99  = "queue_p99_s"
	// Tokens per second of one request: output tokens after the first over
	// its decode time (the slowest tenth and the median request).
	FieldPerUserTPSP10 = "per_user_tps_p10"
	FieldPerUserTPSP50 = "per_user_tps_p50"
	// Share (0..1) of the window's requests that met every objective:
	// slo_attainment when exact, its bounds always.
	FieldSLOAttainment   = "slo_attainment"
	FieldSLOAttainmentLo = "slo_attainment_lo"
	FieldSLOAttainmentHi = "slo_attainment_hi"
	FieldSLORequests     = "slo_requests"   // the requests it is over
	FieldSLOMissPhase    = "slo_miss_phase" // string: queue, prefill or decode, under the floor
	// Requests (and their output tokens) per second that met the objectives.
	FieldGoodputRPS   = "goodput_rps"
	FieldGoodputRPSLo = "goodput_rps_lo"
	FieldGoodputRPSHi = "goodput_rps_hi"
	FieldGoodputTPS   = "goodput_tps"
)

// Suffixes of a bounded latency field: <name>_lo, <name>_hi, the unit
// kept last (ttft_p90_s: ttft_p90_lo_s).
func LoField(name string) string { return boundField(name, "lo") }

// HiField is LoField's upper bound.
func HiField(name string) string { return boundField(name, "hi") }

func boundField(name, b string) string {
	if n, ok := strings.CutSuffix(name, "_s"); ok {
		return n + "_" + b + "_s"
	}
	return name + "_" + b
}

// LatencyQuantileFields are the quantile fields, each with its bounds.
var LatencyQuantileFields = []string{FieldTTFTP50, FieldTTFTP90, FieldTTFTP99, FieldITLP50, FieldITLP90, FieldITLP99,
	FieldE2EP50, FieldE2EP99, FieldQueueP50, FieldQueueP99, FieldPerUserTPSP10, FieldPerUserTPSP50}

// LatencyFields lists every latency field a server point may carry.
var LatencyFields = latencyFields()

func latencyFields() []string {
	out := []string{FieldLatencySource, FieldLatencyReason, FieldTTFTBasis, FieldSLOAttainment, FieldSLOAttainmentLo, FieldSLOAttainmentHi, FieldSLORequests,
		FieldSLOMissPhase, FieldGoodputRPS, FieldGoodputRPSLo, FieldGoodputRPSHi, FieldGoodputTPS}
	for _, q := range LatencyQuantileFields {
		out = append(out, q, LoField(q), HiField(q))
	}
	return out
}

// The latency of tpsmon_server_<level>: LatencyRollup's aggregates of the
// period's windows under their names (the report's latency buckets read
// a rolled-up hour from them: a median of one period's windows is the
// period's own), and the requests-weighted attainment's sums.
const (
	FieldLatencyWindows   = "latency_windows"    // windows with latency_source
	FieldSLOWindows       = "slo_windows"        // windows with slo_requests
	FieldSLOExactWindows  = "slo_exact_windows"  // windows with slo_attainment
	FieldSLOMissedWindows = "slo_missed_windows" // windows with slo_miss_phase
	FieldSLOMetExact      = "slo_met_exact"      // Σ slo_attainment × slo_requests
	FieldSLORequestsExact = "slo_requests_exact" // Σ slo_requests where slo_attainment
	FieldSLOMetLo         = "slo_met_lo"         // Σ slo_attainment_lo × slo_requests
	FieldSLOMetHi         = "slo_met_hi"         // Σ slo_attainment_hi × slo_requests
)

// RollupAgg is one aggregate of a raw field, written as the rollup
// field As.
type RollupAgg struct{ Fn, Field, As string }

// LatencyRollupQuantiles are the quantile fields the latency rollup
// (and the report) reads.
var LatencyRollupQuantiles = []string{FieldTTFTP50, FieldTTFTP90, FieldITLP50, FieldITLP90}

// Suffixes of a quantile field's aggregates in LatencyRollup
// (ttft_p90_s_median, ...).
const (
	SuffixMedian = "_median"
	SuffixMax    = "_max"
	SuffixMin    = "_min"
	SuffixN      = "_windows"
	SuffixLoMin  = "_lo_min"
	SuffixLoN    = "_lo_windows"
	SuffixHiMax  = "_hi_max"
	SuffixHiN    = "_hi_windows"
)

// LatencyRollup are the latency aggregates of a period's (or a report
// bucket's) windows: each quantile's windows (median, worst, lowest,
// their bounds), the requests the attainment is over and the windows
// under the floor.
var LatencyRollup = func() []RollupAgg {
	out := []RollupAgg{{"count", FieldLatencySource, FieldLatencyWindows}, {"sum", FieldSLORequests, FieldSLORequests},
		{"count", FieldSLORequests, FieldSLOWindows}, {"count", FieldSLOAttainment, FieldSLOExactWindows},
		{"count", FieldSLOMissPhase, FieldSLOMissedWindows}}
	for _, q := range LatencyRollupQuantiles {
		lo, hi := LoField(q), HiField(q)
		out = append(out, RollupAgg{"median", q, q + SuffixMedian}, RollupAgg{"max", q, q + SuffixMax}, RollupAgg{"min", q, q + SuffixMin},
			RollupAgg{"count", q, q + SuffixN}, RollupAgg{"min", lo, q + SuffixLoMin}, RollupAgg{"count", lo, q + SuffixLoN},
			RollupAgg{"max", hi, q + SuffixHiMax}, RollupAgg{"count", hi, q + SuffixHiN})
	}
	return out
}()

// Rollups (package rollup) write tpsmon_server_<level> and
// tpsmon_gpu_<level>: the raw fields aggregated under their own names, and
// these. The windows, seconds and GPU-seconds come also per state
// ("<state>_windows", ...) and for idle GPUs ("idle_windows", ...).
const (
	FieldRunningMax = "running_max"
	FieldWindows    = "windows"     // raw windows rolled up
	FieldSeconds    = "seconds"     // their observed seconds
	FieldGPUSeconds = "gpu_seconds" // seconds times the GPUs a point stands for
)

// The decode ceiling's rollup fields (tpsmon_server_<level>): mbu and
// ceiling_tps are the period's means weighted by window length over the
// windows that carry them, mbu_seconds and ceiling_seconds those weights
// (a longer period's mean is the weighted mean of these);
// ceiling_windows counts the windows with a ceiling. Lost throughput is
// summed over them, each window clamped at zero: lost_tokens =
// Σ max(0, ceiling_tps − system_tps) × window_s, above_ceiling_tokens the
// tokens past it (a fact is likely wrong there), lost_seconds =
// Σ max(0, 1 − system_tps / ceiling_tps) × window_s (the time the same
// tokens would not have needed at the ceiling) and lost_gpu_seconds that
// times the GPUs. The report reads the same names from the raw windows.
const (
	FieldMBUSeconds         = "mbu_seconds"
	FieldCeilingSeconds     = "ceiling_seconds"
	FieldCeilingWindows     = "ceiling_windows"
	FieldLostTokens         = "lost_tokens"
	FieldAboveCeilingTokens = "above_ceiling_tokens"
	FieldLostSeconds        = "lost_seconds"
	FieldLostGPUSeconds     = "lost_gpu_seconds"
)

// RollupField names a rollup's time field of one group of windows: a
// state's (RollupField(StateIdle, FieldWindows) is "idle_windows" of
// tpsmon_server_<level>), or IdleGPU's.
func RollupField(group, field string) string { return group + "_" + field }

// IdleGPU is the group of a GPU's windows under IdleGPUUtil % utilization
// (tpsmon_gpu_<level>'s idle_windows, idle_seconds, idle_gpu_seconds).
const (
	IdleGPU     = "idle"
	IdleGPUUtil = 5
)

// Values of the string fields source and energy_source.
const (
	SourceMetrics = "metrics"
	SourceLog     = "log"
	EnergyCounter = "counter"
	EnergyPower   = "power"
)

// States of a server window, in the order they are evaluated.
const (
	StateDown = "down"
	// StateSleeping is an engine put to sleep (vLLM sleep mode): it holds
	// its GPUs with nothing running, and wakes on request.
	StateSleeping      = "sleeping"
	StateIdle          = "idle"
	StateKVBound       = "kv_bound"
	StateQueueBound    = "queue_bound"
	StateUnderutilized = "underutilized"
	StateSaturated     = "saturated"
	StateOK            = "ok"
)

// States lists every state in evaluation order.
var States = []string{StateDown, StateSleeping, StateIdle, StateKVBound, StateQueueBound, StateUnderutilized, StateSaturated, StateOK}

// ServerTags, ServerFields, GPUTags and GPUFields list what each
// measurement may carry; a field that could not be measured is absent.
var (
	ServerTags   = []string{TagHost, TagServer, TagEngine, TagEngineVersion, TagModel, TagGPUs}
	ServerFields = append([]string{FieldTokens, FieldSystemTPS, FieldPerUserTPS, FieldPromptTokens, FieldPromptTPS,
		FieldRunning, FieldWaiting, FieldKVCacheUsage, FieldPreemptions, FieldGPUUtil, FieldGPUUtilMax,
		FieldSMActive, FieldMemUsedBytes, FieldMemTotalBytes, FieldPowerW, FieldEnergyJ, FieldTokensPerJoule,
		FieldTPSPerGPU, FieldState, FieldCoverage, FieldWindowS, FieldSource,
		FieldPromptComputedTokens, FieldPromptCachedTokens, FieldPromptExternalTokens, FieldPrefixHitRate,
		FieldSpecAcceptRate, FieldTokensPerStep, FieldSpecFinding, FieldSuspect,
		FieldDecodeStepsPerS, FieldMBU, FieldCeilingTPS, FieldCeilingFinding}, LatencyFields...)
	GPUTags   = []string{TagHost, TagGPU, TagUUID, TagName, TagServer}
	GPUFields = []string{FieldUtil, FieldUtilMax, FieldMemUtil, FieldMemUsedBytes, FieldMemTotalBytes, FieldPowerW,
		FieldEnergyJ, FieldEnergySource, FieldTempC, FieldSMClockMHz, FieldThrottle, FieldSMActive, FieldSMOccupancy,
		FieldTensorActive, FieldDRAMActive, FieldSamples, FieldCoverage, FieldWindowS, FieldError}
)

// Curve rollups (package rollup, read by the report's operating curve):
// tpsmon_curve_<level>, one point per server series and period, tagged as
// tpsmon_server, with windows (those on the curve) and cells: a string
// of one record per kind and concurrency bin (analysis/curve), each the
// bin's windows, GPU-seconds, running sum, and per rate the windows with
// it and its p10, median and p90 over the period times those windows,
// the period's best window, and the sums of the bin's exact means
// (observed seconds and tokens; stream-seconds and per-user TPS times
// them). One string field, not a field per
// number: InfluxDB's cost is per series and field read, and a tag per bin
// with a field per number took the report 10-20 s over 30 days of 200
// servers on a 2-core machine.
//
// Beside it, sketches: per kind and bin a record of each rate's windows
// counted in logarithmic buckets (within 0.5 % of each value: counts add
// up across periods, which quantiles do not), and per kind the period's
// frontier (every window no other beats on both rates), so that a range
// of periods reads its quantiles to that accuracy and its frontier
// exactly.
const (
	Curve         = "tpsmon_curve"
	FieldCells    = "cells"
	FieldSketches = "sketches"
)

// The numeric profile (sink.influx.profile: numeric) writes every string
// field as numbers, for stores that turn strings into 0 or drop them
// (VictoriaMetrics, Mimir): state as FieldStateCode and one 0/1 field per
// state (NumericField(FieldState, s)), source, energy_source,
// spec_finding, ceiling_finding, latency_source, ttft_basis and slo_miss_phase as codes,
// latency_reason as FieldLatencyReasonCode 1, error as FieldErrorCode 1, suspect as one 0/1
// field per sanity rule (NumericField(FieldSuspect, rule)). A field absent
// in the default profile is absent here too. The codes start at 1 (a 0
// is what a store makes of a string it cannot read) and are append-only:
// a value keeps its code for good, a new value takes the next one.
const (
	FieldStateCode          = "state_code"
	FieldSourceCode         = "source_code"
	FieldEnergySourceCode   = "energy_source_code"
	FieldSpecFindingCode    = "spec_finding_code"
	FieldCeilingFindingCode = "ceiling_finding_code"
	FieldLatencySourceCode  = "latency_source_code"
	FieldSLOMissPhaseCode   = "slo_miss_phase_code"
	FieldTTFTBasisCode      = "ttft_basis_code"
	// FieldLatencyReasonCode is 1 where latency_reason says why the
	// histograms gave no number; its text is only in the default profile.
	FieldLatencyReasonCode = "latency_reason_code"
	// FieldErrorCode is 1 in a window in which the GPU could not be read;
	// the error's text is only in the default profile (and the log).
	FieldErrorCode = "error_code"
)

// StateCodes are the values of state_code. Append-only.
var StateCodes = map[string]int64{
	StateDown: 1, StateIdle: 2, StateKVBound: 3, StateQueueBound: 4,
	StateUnderutilized: 5, StateSaturated: 6, StateOK: 7, StateSleeping: 8,
}

// SourceCodes, EnergySourceCodes and SpecFindingCodes are the values of
// source_code, energy_source_code and spec_finding_code. Append-only.
// spec_finding's empty value (speculation on and effective) is 0: it is a
// finding of none, not a missing one.
var (
	SourceCodes       = map[string]int64{SourceMetrics: 1, SourceLog: 2}
	EnergySourceCodes = map[string]int64{EnergyCounter: 1, EnergyPower: 2}
	SpecFindingCodes  = map[string]int64{"": 0, "spec_ineffective": 1}
	// CeilingFindingCodes are the values of ceiling_finding_code
	// (analysis.Finding). Append-only.
	CeilingFindingCodes = map[string]int64{"near_ceiling": 1, "demand_bound": 2, "host_bound": 3}
	// LatencySourceCodes and SLOMissPhaseCodes are the values of
	// latency_source_code and slo_miss_phase_code. Append-only.
	LatencySourceCodes = map[string]int64{"requests": 1, "histogram": 2}
	SLOMissPhaseCodes  = map[string]int64{"queue": 1, "prefill": 2, "decode": 3}
	// TTFTBasisCodes are the values of ttft_basis_code. Append-only.
	TTFTBasisCodes = map[string]int64{"prefill": 1, "slot": 2, "http": 3}
)

// NumericField names the 0/1 field of one value of a string field in the
// numeric profile: "state_idle", "suspect_gpu_idle".
func NumericField(field, value string) string { return field + "_" + value }

// TTFTNarrowed says what a TTFT of the given basis (FieldTTFTBasis)
// leaves out of the wait a user saw, and what would widen it; empty for
// "http" (only the connection and the request's reading are left out)
// and for a basis it does not know.
func TTFTNarrowed(basis string) string {
	switch basis {
	case "slot":
		return "counts from the request's slot, not its arrival (llama.cpp logs the HTTP handler at -lv 4)"
	case "prefill":
		return "counts its prompt's evaluation only: the log says nothing of the request's arrival or queue"
	}
	return ""
}
