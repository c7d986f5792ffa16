package heapgoal

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		name       string
		live, scan uint64
		want       int
	}{
		{"before the first collection: the floor", 0, 0, 25},
		{"a tiny heap: the floor", 200 << 10, 8 << 10, 25},
		{"half the floor", mb / 2, 0, 25},
		{"just over half the floor: twice the live heap", mb/2 + 1, 0, 26},
		{"S1's heap: twice the live heap and the scan", 800 << 10, 100 << 10, 42},
		{"just under the runtime's minimum", 2*mb - 1, 0, 100},
		{"stacks and globals count as for GOGC=100", 1900 << 10, 300 << 10, 100},
		{"at the runtime's minimum: GOGC=100", 2 * mb, 0, 100},
		{"a large heap: GOGC=100", 50 * mb, 2 * mb, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Percent(tc.live, tc.scan)
			if got != tc.want {
				t.Fatalf("Percent(%d, %d) = %d, want %d", tc.live, tc.scan, got, tc.want)
			}
			// The goal the runtime derives from it: never under GOGC=100's
			// (2×live + scan), never under the floor, and no more than the
			// larger of the two and a percent's rounding.
			goal := max(uint64(runtimeMin)*uint64(got)/100, tc.live+(tc.live+tc.scan)*uint64(got)/100)
			want := max(uint64(Floor), 2*tc.live+tc.scan)
			if got == 100 {
				want = max(uint64(runtimeMin), want)
			}
			if goal < want-runtimeMin/100 || goal > want+runtimeMin/100 {
				t.Fatalf("goal %d for live %d, scan %d; want %d within 1%% of 4 MB", goal, tc.live, tc.scan, want)
			}
		})
	}
}

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestKeep runs the keeper in this process: after collections its GOGC
// follows Percent of what the last collection left, the goal is the
// floor or twice the live heap, and stop restores GOGC=100.
func TestKeep(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100)) // whatever GOGC the tests run under
	stop := Keep()
	defer stop()
	var keep [][]byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A live heap of about 1.5 MB, above the floor's half, so that
		// the goal follows the heap rather than the floor.
		keep = append(keep, make([]byte, 64<<10))
		if len(keep) > 24 {
			keep = keep[1:]
		}
		runtime.GC()
		live := read("/gc/heap/live:bytes")
		scan := read("/gc/scan/stack:bytes") + read("/gc/scan/globals:bytes")
		want := Percent(live, scan)
		if got := int(read("/gc/gogc:percent")); got == want && want < 100 {
			goal := read("/gc/heap/goal:bytes")
			if goal >= runtimeMin || goal < max(Floor, 2*live) {
				t.Fatalf("heap goal %d with %d live: want at least max(floor, 2×live) and under the runtime's 4 MB", goal, live)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d after collections, want %d (live %d, scan %d)", read("/gc/gogc:percent"), want, live, scan)
		}
		time.Sleep(10 * time.Millisecond) // the cleanup runs on its own goroutine
	}
	runtime.KeepAlive(keep)
	stop()
	if p := read("/gc/gogc:percent"); p != 100 {
		t.Fatalf("GOGC %d after stop, want 100", p)
	}
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	if p := read("/gc/gogc:percent"); p != 100 {
		t.Fatalf("GOGC %d after stop and a collection, want 100", p)
	}
}
