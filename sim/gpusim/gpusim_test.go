package gpusim

import (
	"testing"
	"time"
)

func TestSimFollowsLoad(t *testing.T) {
	load := 0.0
	s := New(2, func(time.Time) float64 { return load })
	t0 := time.Unix(1000, 0)
	idle := s.Sample(t0)
	load = 1
	busy := s.Sample(t0.Add(10 * time.Second))
	for i := range idle {
		if idle[i].UtilPct != 0 || busy[i].UtilPct < 90 {
			t.Errorf("gpu %d util idle %v busy %v", i, idle[i].UtilPct, busy[i].UtilPct)
		}
		if busy[i].PowerW <= idle[i].PowerW {
			t.Errorf("gpu %d power did not rise: %v -> %v", i, idle[i].PowerW, busy[i].PowerW)
		}
		// Energy integrates the power of the interval: 10 s at busy power.
		want := int64(busy[i].PowerW * 10 * 1000)
		if d := busy[i].EnergyMJ - idle[i].EnergyMJ; d < want-1 || d > want+1 {
			t.Errorf("gpu %d energy delta %d mJ, want %d", i, d, want)
		}
	}
}
