package analysis

import (
	"math"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// TestVerdict walks the states of design §5 in their order, each threshold
// from both sides at the design's values.
func TestVerdict(t *testing.T) {
	base := verdictInput{tokens: 100, running: 4, waiting: 0, kv: 0.5, util: 75}
	tests := []struct {
		name string
		mod  func(*verdictInput)
		want string
	}{
		{"ok", func(*verdictInput) {}, schema.StateOK},
		{"down", func(v *verdictInput) { v.down = true }, schema.StateDown},
		{"down before anything else", func(v *verdictInput) { v.down, v.tokens, v.running = true, 0, 0 }, schema.StateDown},

		{"idle", func(v *verdictInput) { v.tokens, v.running = 0, 0 }, schema.StateIdle},
		{"idle, running unknown", func(v *verdictInput) { v.tokens, v.running = 0, -1 }, schema.StateIdle},
		{"no tokens but a request running is not idle", func(v *verdictInput) { v.tokens, v.running = 0, 1 }, schema.StateOK},
		{"unknown tokens are not idle", func(v *verdictInput) { v.tokens, v.running = -1, 0 }, schema.StateOK},

		{"kv bound at kv_bound", func(v *verdictInput) { v.waiting, v.kv = 3, 0.9 }, schema.StateKVBound},
		{"below kv_bound", func(v *verdictInput) { v.waiting, v.kv = 3, 0.89 }, schema.StateOK},
		{"kv bound by preemption", func(v *verdictInput) { v.preempted, v.kv = true, 0.92 }, schema.StateKVBound},
		{"preempted below kv_bound", func(v *verdictInput) { v.preempted, v.kv = true, 0.89 }, schema.StateOK},
		{"a full cache with nothing waiting", func(v *verdictInput) { v.kv = 0.99 }, schema.StateOK},
		{"kv bound before queue bound", func(v *verdictInput) { v.waiting, v.kv, v.util = 5, 0.95, 45 }, schema.StateKVBound},

		{"waiting at its threshold", func(v *verdictInput) { v.waiting, v.util = 0.5, 45 }, schema.StateQueueBound},
		{"waiting below its threshold", func(v *verdictInput) { v.waiting, v.util = 0.49, 45 }, schema.StateOK},

		{"queue bound below queue_util", func(v *verdictInput) { v.waiting, v.util = 5, 59.9 }, schema.StateQueueBound},
		{"at queue_util", func(v *verdictInput) { v.waiting, v.util = 5, 60 }, schema.StateOK},

		{"underutilized below under_util", func(v *verdictInput) { v.util = 39.9 }, schema.StateUnderutilized},
		{"at under_util", func(v *verdictInput) { v.util = 40 }, schema.StateOK},
		{"underutilized needs tokens", func(v *verdictInput) { v.tokens, v.util = -1, 20 }, schema.StateOK},

		{"saturated at saturated_util", func(v *verdictInput) { v.waiting, v.util = 5, 90 }, schema.StateSaturated},
		{"below saturated_util", func(v *verdictInput) { v.waiting, v.util = 5, 89.9 }, schema.StateOK},

		{"no gpu data never guesses", func(v *verdictInput) { v.waiting, v.util = 5, -1 }, schema.StateOK},
		{"no gpu data, nothing waits", func(v *verdictInput) { v.util = -1 }, schema.StateOK},
	}
	for _, tt := range tests {
		in := base
		tt.mod(&in)
		if got := verdict(in, DefaultThresholds); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestStateOfWindow checks what State takes from a server's window: SM
// activity over utilization, missing values as unknown, the unrounded
// tokens, and the joiner's down and preempted.
func TestStateOfWindow(t *testing.T) {
	flowing := window.ServerWindow{Tokens: window.Some[int64](1000), ExactTokens: window.Some(1000.0),
		Running: window.Some(4.0), Waiting: window.Some(0.0), KVCacheUsage: window.Some(0.5), GPUUtil: window.Some(95.0)}
	tests := []struct {
		name string
		mod  func(*window.ServerWindow)
		want string
	}{
		{"busy GPU", func(*window.ServerWindow) {}, schema.StateOK},
		{"SM activity over utilization", func(w *window.ServerWindow) { w.SMActive = window.Some(35.0) }, schema.StateUnderutilized},
		{"utilization without SM activity", func(w *window.ServerWindow) { w.GPUUtil = window.Some(35.0) }, schema.StateUnderutilized},
		{"no GPU readings", func(w *window.ServerWindow) { w.GPUUtil = window.Opt[float64]{} }, schema.StateOK},
		{"down", func(w *window.ServerWindow) { w.Down = true }, schema.StateDown},
		{"idle", func(w *window.ServerWindow) {
			w.Tokens, w.ExactTokens, w.Running = window.Some[int64](0), window.Some(0.0), window.Some(0.0)
		}, schema.StateIdle},
		{"idle, running unknown", func(w *window.ServerWindow) {
			w.Tokens, w.ExactTokens, w.Running = window.Some[int64](0), window.Some(0.0), window.Opt[float64]{}
		}, schema.StateIdle},
		{"a fraction of a token is not idle", func(w *window.ServerWindow) {
			w.Tokens, w.ExactTokens, w.Running = window.Some[int64](0), window.Some(0.4), window.Some(0.0)
		}, schema.StateOK},
		{"tokens unknown", func(w *window.ServerWindow) {
			w.Tokens, w.ExactTokens, w.Running = window.Opt[int64]{}, window.Opt[float64]{}, window.Some(0.0)
		}, schema.StateOK},
		{"preempted with a full cache", func(w *window.ServerWindow) {
			w.Preempted, w.KVCacheUsage = true, window.Some(0.95)
		}, schema.StateKVBound},
		{"waiting with a full cache", func(w *window.ServerWindow) {
			w.Waiting, w.KVCacheUsage = window.Some(2.0), window.Some(0.95)
		}, schema.StateKVBound},
		{"waiting unknown, cache full", func(w *window.ServerWindow) {
			w.Waiting, w.KVCacheUsage = window.Opt[float64]{}, window.Some(0.95)
		}, schema.StateOK},
		{"saturated", func(w *window.ServerWindow) { w.Waiting = window.Some(3.0) }, schema.StateSaturated},
	}
	for _, tt := range tests {
		w := flowing
		tt.mod(&w)
		if got := State(w, DefaultThresholds); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestThresholdsValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Thresholds)
		key  string // in the error; "" for none
	}{
		{"defaults", func(*Thresholds) {}, ""},
		{"kv_bound 1", func(th *Thresholds) { th.KVBound = 1 }, ""},
		{"kv_bound above 1", func(th *Thresholds) { th.KVBound = 1.01 }, "kv_bound"},
		{"kv_bound 0", func(th *Thresholds) { th.KVBound = 0 }, "kv_bound"},
		{"kv_bound NaN", func(th *Thresholds) { th.KVBound = math.NaN() }, "kv_bound"},
		{"queue_util 0", func(th *Thresholds) { th.QueueUtil = 0 }, ""},
		{"queue_util negative", func(th *Thresholds) { th.QueueUtil = -0.1 }, "queue_util"},
		{"under_util 100", func(th *Thresholds) { th.UnderUtil = 100 }, ""},
		{"under_util above 100", func(th *Thresholds) { th.UnderUtil = 100.1 }, "under_util"},
		{"saturated_util infinite", func(th *Thresholds) { th.SaturatedUtil = math.Inf(1) }, "saturated_util"},
		{"waiting 0", func(th *Thresholds) { th.Waiting = 0 }, ""},
		{"waiting negative", func(th *Thresholds) { th.Waiting = -1 }, "waiting"},
		{"waiting infinite", func(th *Thresholds) { th.Waiting = math.Inf(1) }, "waiting"},
	}
	for _, tt := range tests {
		th := DefaultThresholds
		tt.mod(&th)
		err := th.Validate()
		switch {
		case tt.key == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.key != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.key+": ")):
			t.Errorf("%s: error %v, want one naming %s", tt.name, err, tt.key)
		}
	}
}
