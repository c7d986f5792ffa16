// Package heapgoal lowers the Go collector's smallest heap goal in the
// daemon from the runtime's 4 MB to 1 MB, keeping GOGC=100's goal of twice
// the live heap wherever that is larger.
//
// On a small node tpsmon's live heap is under 1 MB. With GOGC=100 the
// runtime lets the heap grow to 4 MB before it collects, and the garbage in
// between stays resident: 2-3 MB of the daemon's 22 MiB peak in bench S1. A
// lower GOGC would collect earlier at every size and cost CPU where the
// live heap is large (S3 with GOGC=25: 1.06 % of a core against 0.80 %).
// The runtime scales its minimum goal with GOGC (4 MB × GOGC/100), so after
// each collection Keep sets GOGC between 25 and 100 such that the next goal
// is max(1 MB, GOGC=100's goal). The goal never falls below twice the live
// heap, so the collector cannot run more often than GOGC=100 would at a
// live heap of max(live, 0.5 MB), however the heap grows: there is no
// memory limit to thrash against, and from 2 MB of live heap up it is
// GOGC=100 exactly.
package heapgoal

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

const (
	// runtimeMin is the runtime's smallest heap goal at GOGC=100.
	runtimeMin = 4 << 20
	// Floor is the smallest heap goal Keep asks for.
	Floor = 1 << 20
)

// Percent returns the GOGC under which the runtime's next heap goal is
// max(Floor, 2×live + scan), GOGC=100's goal after a collection that left
// live bytes of heap and scan bytes of stacks and globals to scan. The
// runtime's goal is max(runtimeMin × p/100, live + (live+scan) × p/100):
// for p ≤ 100 the second term is at most 2×live + scan, so a p that lifts
// the first term to that is enough.
func Percent(live, scan uint64) int {
	want := 2*live + scan
	if want >= runtimeMin {
		return 100
	}
	p := int((want*100 + runtimeMin - 1) / runtimeMin) // rounded up
	return max(p, Floor*100/runtimeMin)
}

// sentinel is dropped right after it is made: the cleanup attached to it
// runs once the next collection has found it unreachable. It holds a
// pointer so that it is not packed with other tiny objects.
type sentinel struct{ _ *byte }

type keeper struct {
	mu      sync.Mutex
	stopped bool
	set     int // the GOGC set last
	samples []metrics.Sample
}

// Keep sets GOGC after every collection, as Percent says, until stop is
// called, which restores GOGC=100. The process's GOGC must be 100 (the
// caller leaves it alone when the environment sets it).
func Keep() (stop func()) {
	k := &keeper{set: 100, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
	k.adjust()
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if !k.stopped {
			k.stopped = true
			debug.SetGCPercent(100)
		}
	}
}

// adjust sets GOGC from the last collection and waits for the next one.
func (k *keeper) adjust() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	metrics.Read(k.samples)
	var v [3]uint64
	for i, s := range k.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	// Before the first collection the live heap reads zero: the floor
	// applies from the start, or the first cycle would still run to 4 MB.
	if p := Percent(v[0], v[1]+v[2]); p != k.set {
		debug.SetGCPercent(p)
		k.set = p
	}
	runtime.AddCleanup(new(sentinel), (*keeper).adjust, k)
}
