// Package heapgoal lowers the Go collector's smallest heap goal in the
// daemon from the runtime's 4 MB to 1 MB while it allocates slowly, with
// twice the live heap as the goal wherever that is larger.
//
// On a small node tpsmon's live heap is under 1 MB and it allocates ~30 kB
// a second. With GOGC=100 the runtime lets the heap grow to 4 MB before it
// collects, and the garbage in between stays resident: 2-3 MB of the
// daemon's 22 MiB peak in bench S1. A lower GOGC would collect earlier at
// every size and rate and cost CPU where the daemon is busy (S3 with
// GOGC=25: 1.06 % of a core against 0.80 %). The runtime scales its minimum
// goal with GOGC (4 MB × GOGC/100), so after each collection Run sets GOGC
// between 25 and 100 such that the next goal is max(1 MB, 2 × live heap),
// unless the heap allocated over the last cycle says that goal would be
// reached in under MinCycle: then the runtime's own goal stands (GOGC=100),
// so a busy daemon (a log firehose, a large node) collects exactly as
// before. The rate is judged after every collection and every MinCycle, so
// a goal raised for a burst (start-up, a backlog) comes down within
// MinCycle of its end. The goal never falls below twice the live heap and
// the lowered one is only kept while collections come at most about once
// per MinCycle: there is no memory limit to thrash against.
//
// GOGC=100's own goal adds the stacks and globals the collector scans to
// the live heap's double; Run leaves them out. In bench S1 they are ~0.4 MB
// (the binary's 0.3 MB of globals, most of it) against ~0.9 MB live: left
// in, the daemon's anonymous memory peaked at 5.2-5.4 MB instead of 4.6,
// with collections every ~45 s instead of ~21 s (1-2 ms of CPU each).
package heapgoal

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/internal/wake"
)

const (
	// runtimeMin is the runtime's smallest heap goal at GOGC=100.
	runtimeMin = 4 << 20
	// Floor is the smallest heap goal Run asks for.
	Floor = 1 << 20
	// MinCycle is the shortest time between collections the lowered goal
	// may cause, at the allocation rate of the last cycle.
	MinCycle = 10 * time.Second
)

// Percent returns the GOGC for the next cycle after a collection that left
// live bytes of heap, when the heap grew at rate bytes a second over the
// last cycle (0: not known yet). The goal asked for is max(Floor, 2×live);
// if the heap would get there in under MinCycle, 100. The runtime's goal
// is max(runtimeMin × p/100, live + (live+scan) × p/100), scan being the
// stacks and globals: the first term is lifted to the goal, the second
// only raises it where the roots are large against the heap.
func Percent(live uint64, rate float64) int {
	return percent(live, rate, MinCycle)
}

func percent(live uint64, rate float64, minCycle time.Duration) int {
	goal := max(Floor, 2*live)
	if goal >= runtimeMin || float64(goal-live) < rate*minCycle.Seconds() {
		return 100
	}
	return int((goal*100 + runtimeMin - 1) / runtimeMin) // rounded up
}

// sentinel is dropped right after it is made: the cleanup attached to it
// runs once the next collection has found it unreachable. It holds a
// pointer so that it is not packed with other tiny objects.
type sentinel struct{ _ *byte }

type keeper struct {
	minCycle time.Duration
	mu       sync.Mutex
	stopped  bool
	set      int // the GOGC set last
	samples  []metrics.Sample
	allocs   uint64 // heap bytes allocated in all, at the last adjust
	at       time.Time
}

// Run sets GOGC as Percent says after every collection and every
// MinCycle until ctx ends, then restores GOGC=100. The process's GOGC must
// be 100 (the caller leaves it alone when the environment sets it).
func Run(ctx context.Context) { run(ctx, MinCycle) }

func run(ctx context.Context, minCycle time.Duration) {
	k := &keeper{minCycle: minCycle, set: 100, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
	}}
	k.adjust()
	defer k.stop()
	// On the shared instants: the check costs no wakeup of its own.
	t := wake.NewTicker(minCycle)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.mu.Lock()
			if !k.stopped {
				k.setLocked()
			}
			k.mu.Unlock()
			t.Next()
		}
	}
}

func (k *keeper) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	debug.SetGCPercent(100)
}

// adjust sets GOGC after a collection and waits for the next one.
func (k *keeper) adjust() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	k.setLocked()
	runtime.AddCleanup(new(sentinel), (*keeper).adjust, k)
}

// setLocked sets GOGC from the last collection's live heap and the rate
// of allocation since the last call.
func (k *keeper) setLocked() {
	metrics.Read(k.samples)
	var v [2]uint64 // live, allocs
	for i, s := range k.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	now := time.Now()
	var rate float64
	if !k.at.IsZero() {
		rate = float64(v[1]-k.allocs) / max(now.Sub(k.at).Seconds(), 1e-3)
	}
	k.allocs, k.at = v[1], now
	// Before the first collection the live heap reads zero: the floor
	// applies from the start, or the first cycle would still run to 4 MB.
	if p := percent(v[0], rate, k.minCycle); p != k.set {
		debug.SetGCPercent(p)
		k.set = p
	}
}
