package heapgoal

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	s1 := 30e3 // bytes a second: bench S1's daemon
	for _, tc := range []struct {
		name string
		live uint64
		rate float64
		want int
	}{
		{"before the first collection: the floor", 0, 0, 25},
		{"a tiny heap: the floor", 200 << 10, s1, 25},
		{"half the floor", mb / 2, s1, 25},
		{"just over half the floor: twice the live heap", mb/2 + 1, s1, 26},
		{"S1's heap: twice the live heap", 900 << 10, s1, 44},
		{"just under the runtime's minimum", 2*mb - 1, 0, 100},
		{"stacks and globals do not count: under 2 MB live, lowered", 1900 << 10, s1, 93},
		{"at the runtime's minimum: GOGC=100", 2 * mb, s1, 100},
		{"a large heap: GOGC=100", 50 * mb, s1, 100},
		{"a firehose: the runtime's goal", 800 << 10, 5e6, 100},
		{"a cycle just over MinCycle: lowered", mb / 2, float64(mb/2) / MinCycle.Seconds() * 0.99, 25},
		{"a cycle just under MinCycle: the runtime's goal", mb / 2, float64(mb/2) / MinCycle.Seconds() * 1.01, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Percent(tc.live, tc.rate)
			if got != tc.want {
				t.Fatalf("Percent(%d, %g) = %d, want %d", tc.live, tc.rate, got, tc.want)
			}
			if got == 100 {
				return
			}
			// The goal the runtime derives from it, with no stacks or
			// globals to scan: never under twice the live heap, never under
			// the floor, and no more than the larger of the two and a
			// percent's rounding.
			goal := max(uint64(runtimeMin)*uint64(got)/100, tc.live+tc.live*uint64(got)/100)
			want := max(uint64(Floor), 2*tc.live)
			if goal < want || goal > want+runtimeMin/100 {
				t.Fatalf("goal %d for live %d; want %d to 1%% of 4 MB above", goal, tc.live, want)
			}
			if cycle := float64(goal-tc.live) / tc.rate; tc.rate > 0 && cycle < MinCycle.Seconds() {
				t.Fatalf("a cycle of %.1f s at %g bytes/s, want at least %v", cycle, tc.rate, MinCycle)
			}
		})
	}
}

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestRun runs the keeper in this process: GOGC follows percent of what
// the last collection left and the rate since, a lowered goal is the floor
// or twice the live heap, a goal raised for a burst comes down once it is
// over, and the end restores GOGC=100. The test collects every few
// milliseconds, so MinCycle is shortened or lengthened to suit each case.
func TestRun(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // whatever GOGC the tests run under
	for _, tc := range []struct {
		name     string
		minCycle time.Duration
		burst    bool // allocate 64 MB between collections
		quiet    bool // then wait, allocating nothing, for ticks to see it
		want     func(p uint64) bool
	}{
		{"slow allocation: the goal is lowered", time.Millisecond, false, false, func(p uint64) bool { return p < 100 }},
		{"fast allocation: the runtime's goal", time.Hour, true, false, func(p uint64) bool { return p == 100 }},
		{"a burst, then quiet: lowered again", 100 * time.Millisecond, true, true, func(p uint64) bool { return p < 100 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { run(ctx, tc.minCycle); close(done) }()
			defer func() { cancel(); <-done }()
			var held [][]byte
			var sink []byte
			deadline := time.Now().Add(10 * time.Second)
			for cycles := 1; ; cycles++ {
				// A live heap of about 1.5 MB, above the floor's half, so
				// that a lowered goal follows the heap, not the floor.
				held = append(held, make([]byte, 64<<10))
				if len(held) > 24 {
					held = held[1:]
				}
				if tc.burst {
					for range 1024 {
						sink = make([]byte, 64<<10)
					}
				}
				runtime.GC()
				time.Sleep(10 * time.Millisecond) // the cleanup runs on its own goroutine
				p := read("/gc/gogc:percent")
				if tc.burst && !tc.quiet && cycles < 5 {
					continue // the first cycle has no rate yet and is lowered
				}
				if tc.quiet {
					if p != 100 {
						// A tick between the collection and the read
						// saw the quiet after it: burst again.
						if time.Now().After(deadline) {
							t.Fatalf("GOGC %d after %d bursts, want 100", p, cycles)
						}
						continue
					}
					time.Sleep(4 * tc.minCycle)
					p = read("/gc/gogc:percent")
				}
				if tc.want(p) {
					if goal, live := read("/gc/heap/goal:bytes"), read("/gc/heap/live:bytes"); p < 100 && (goal >= runtimeMin || goal < max(Floor, 2*live)) {
						t.Fatalf("heap goal %d with %d live: want at least max(floor, 2×live) and under the runtime's 4 MB", goal, live)
					}
					break
				}
				if time.Now().After(deadline) || !tc.burst || tc.quiet {
					t.Fatalf("GOGC %d after %d collections (live %d)", p, cycles, read("/gc/heap/live:bytes"))
				}
			}
			runtime.KeepAlive(held)
			runtime.KeepAlive(sink)
			cancel()
			<-done
			if p := read("/gc/gogc:percent"); p != 100 {
				t.Fatalf("GOGC %d after the end, want 100", p)
			}
			runtime.GC()
			time.Sleep(50 * time.Millisecond)
			if p := read("/gc/gogc:percent"); p != 100 {
				t.Fatalf("GOGC %d after the end and a collection, want 100", p)
			}
		})
	}
}
