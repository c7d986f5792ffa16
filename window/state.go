package window

import "github.com/tpsmon/tpsmon/schema"

// Thresholds tune the state verdict (design §5).
type Thresholds struct {
	KVBound       float64 // KV cache usage (0..1) at which waiting means memory-bound
	QueueUtil     float64 // GPU % under which waiting means the scheduler holds the GPU back
	UnderUtil     float64 // GPU % under which flowing tokens mean too little demand
	SaturatedUtil float64 // GPU % at which waiting means the hardware is full
	// Waiting is the mean queue length from which requests count as
	// waiting; a single request caught in the queue by one scrape of a
	// window should not flip the verdict.
	Waiting float64
}

// DefaultThresholds are the design's values.
var DefaultThresholds = Thresholds{KVBound: 0.9, QueueUtil: 60, UnderUtil: 40, SaturatedUtil: 90, Waiting: 0.5}

// verdictInput holds a window's measurements; negative means unknown.
type verdictInput struct {
	down      bool
	tokens    float64
	running   float64
	waiting   float64
	preempted bool
	kv        float64
	util      float64 // SM activity where known, else NVML utilization
}

// verdict evaluates the states of design §5 in order.
func verdict(in verdictInput, th Thresholds) string {
	if in.down {
		return schema.StateDown
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
