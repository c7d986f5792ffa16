package analysis

import (
	"fmt"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// Thresholds tune the state verdict (design §5). The configuration's
// `thresholds` section decodes into it.
type Thresholds struct {
	KVBound       float64 `mapstructure:"kv_bound"`       // KV cache usage (0..1) at which waiting means memory-bound
	QueueUtil     float64 `mapstructure:"queue_util"`     // GPU % under which waiting means the scheduler holds the GPU back
	UnderUtil     float64 `mapstructure:"under_util"`     // GPU % under which flowing tokens mean too little demand
	SaturatedUtil float64 `mapstructure:"saturated_util"` // GPU % at which waiting means the hardware is full
	// Waiting is the mean queue length from which requests count as
	// waiting; a single request caught in the queue by one scrape of a
	// window should not flip the verdict.
	Waiting float64 `mapstructure:"waiting"`
	// The decode ceiling's findings (Finding): an MBU from NearMBU is
	// near the ceiling; under LowMBU with more than FewRunning requests
	// running the host or scheduler holds the GPU back; with at most
	// FewRunning running and none waiting, demand does.
	NearMBU    float64 `mapstructure:"ceiling_near_mbu"`
	LowMBU     float64 `mapstructure:"ceiling_low_mbu"`
	FewRunning float64 `mapstructure:"ceiling_few_running"`
	// SpecAccept is the speculative-decoding acceptance rate (0..1) under
	// which a window's finding is spec_ineffective. Under 0.3 a draft of
	// k tokens adds under 0.3·k accepted tokens per step (with k = 3 to 5,
	// typical, about one), too few to pay for drafting and verifying them.
	SpecAccept float64 `mapstructure:"spec_accept"`
}

// DefaultThresholds are the design's values.
var DefaultThresholds = Thresholds{KVBound: 0.9, QueueUtil: 60, UnderUtil: 40, SaturatedUtil: 90, Waiting: 0.5,
	NearMBU: 0.7, LowMBU: 0.3, FewRunning: 2, SpecAccept: 0.3}

// Validate says which threshold cannot be one, by its configuration key.
func (th Thresholds) Validate() error {
	// Comparisons written so that NaN fails them too.
	if !(th.KVBound > 0 && th.KVBound <= 1) {
		return fmt.Errorf("kv_bound: %v is not a ratio in (0, 1]", th.KVBound)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"queue_util", th.QueueUtil}, {"under_util", th.UnderUtil}, {"saturated_util", th.SaturatedUtil}} {
		if !(t.v >= 0 && t.v <= 100) {
			return fmt.Errorf("%s: %v is not a percentage in [0, 100]", t.name, t.v)
		}
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"ceiling_near_mbu", th.NearMBU}, {"ceiling_low_mbu", th.LowMBU}} {
		if !(t.v > 0 && t.v <= 1) {
			return fmt.Errorf("%s: %v is not a ratio in (0, 1]", t.name, t.v)
		}
	}
	if !(th.LowMBU < th.NearMBU) {
		return fmt.Errorf("ceiling_low_mbu: %v is not below ceiling_near_mbu %v", th.LowMBU, th.NearMBU)
	}
	if !(th.FewRunning >= 0 && th.FewRunning <= sample.MaxRequests) {
		return fmt.Errorf("ceiling_few_running: %v is not a request count in [0, %g]", th.FewRunning, sample.MaxRequests)
	}
	if !(th.SpecAccept >= 0 && th.SpecAccept <= 1) {
		return fmt.Errorf("spec_accept: %v is not a ratio in [0, 1]", th.SpecAccept)
	}
	if !(th.Waiting >= 0 && th.Waiting <= sample.MaxRequests) {
		return fmt.Errorf("waiting: %v is not a queue length in [0, %g]", th.Waiting, sample.MaxRequests)
	}
	return nil
}

// State is the verdict of design §5 on a server's window, one of
// schema.States. The GPU's busyness it weighs is SM activity where it is
// known (how much of the GPU works), else NVML utilization (that something
// ran); without either it never says queue_bound, underutilized or
// saturated. Where the engine says why requests wait (vLLM
// num_requests_waiting_by_reason), only those waiting for capacity (KV
// cache memory) count as waiting: deferred ones wait for something else
// (a KV transfer, a grammar, an adapter) and neither the memory nor the
// scheduler holds them. An engine asleep most of the window (vLLM
// engine_sleep_state awake under 0.5) is sleeping: it holds its GPUs'
// memory with nothing running, which idle does not say.
func State(w window.ServerWindow, th Thresholds) string {
	in := verdictInput{down: w.Down, tokens: unknown(w.ExactTokens), running: unknown(w.Running),
		waiting: unknown(w.Waiting), kv: unknown(w.KVCacheUsage), preempted: w.Preempted, util: unknown(w.GPUUtil)}
	if w.SMActive.OK {
		in.util = w.SMActive.V
	}
	capacity, deferred := w.Gauges[sample.WaitingCapacity], w.Gauges[sample.WaitingDeferred]
	switch {
	case capacity.OK:
		in.waiting = capacity.V
	case deferred.OK && in.waiting >= 0:
		in.waiting = max(in.waiting-deferred.V, 0)
	}
	if a := w.Gauges[sample.Awake]; a.OK && a.V < 0.5 {
		in.sleeping = true
	}
	return verdict(in, th)
}

// unknown is v, or -1 when v is missing.
func unknown(v window.Opt[float64]) float64 {
	if !v.OK {
		return -1
	}
	return v.V
}

// verdictInput holds a window's measurements; negative means unknown.
type verdictInput struct {
	down      bool
	sleeping  bool
	tokens    float64
	running   float64
	waiting   float64
	preempted bool
	kv        float64
	util      float64
}

// verdict evaluates the states of design §5 in order.
func verdict(in verdictInput, th Thresholds) string {
	if in.down {
		return schema.StateDown
	}
	if in.sleeping {
		return schema.StateSleeping
	}
	waits := in.waiting >= th.Waiting
	switch {
	case in.tokens == 0 && in.running <= 0:
		return schema.StateIdle
	case (waits || in.preempted) && in.kv >= th.KVBound:
		return schema.StateKVBound
	case waits && in.util >= 0 && in.util < th.QueueUtil:
		return schema.StateQueueBound
	case in.tokens > 0 && !waits && in.util >= 0 && in.util < th.UnderUtil:
		return schema.StateUnderutilized
	case waits && in.util >= th.SaturatedUtil:
		return schema.StateSaturated
	}
	return schema.StateOK
}
