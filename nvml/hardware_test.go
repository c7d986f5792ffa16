//go:build gpu

package nvml

import (
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// TestRealNVML checks the adapter on a machine with an NVIDIA driver and
// prints what it reads; run it with packaging/nvml-probe.sh.
func TestRealNVML(t *testing.T) {
	s, err := OpenSystem(nil)
	if err != nil {
		t.Fatalf("NVML: %v", err)
	}
	defer s.Close()
	t.Logf("%d GPUs", s.Devices())
	var first []sample.GPU
	const rounds = 20
	start := time.Now()
	for i := range rounds {
		smp := s.Sample(time.Now())
		if i == 0 {
			first = smp
		}
		time.Sleep(50 * time.Millisecond)
	}
	perRound := (time.Since(start) - rounds*50*time.Millisecond) / rounds
	t.Logf("cost: %v per sample of all GPUs, %v per GPU", perRound, perRound/time.Duration(max(1, s.Devices())))
	time.Sleep(1100 * time.Millisecond) // GPM needs two samples over a second apart
	last := s.Sample(time.Now())
	for i, g := range last {
		if g.Err != nil {
			t.Errorf("gpu %d: %v", g.Index, g.Err)
			continue
		}
		t.Logf("gpu %d %s %q instance=%q: util %.0f%% mem_util %.0f%% mem %d/%d MiB power %.1f W energy %d mJ temp %.0f C sm_clock %.0f MHz throttle %#x",
			g.Index, g.UUID, g.Name, g.Instance, g.UtilPct, g.MemUtilPct, g.MemUsedBytes>>20, g.MemTotalBytes>>20,
			g.PowerW, g.EnergyMJ, g.TempC, g.SMClockMHz, g.Throttle)
		t.Logf("gpu %d: driver utilization samples in the last read: %d (first read: %d); GPM: %v (sm_active %.1f%%, occupancy %.1f%%, tensor %.1f%%, dram %.1f%%)",
			g.Index, len(g.UtilSamples), len(first[min(i, len(first)-1)].UtilSamples), g.Have(sample.FieldGPM),
			g.SMActive, g.SMOccupancy, g.TensorActive, g.DRAMActive)
		if g.Instance == "" && !g.Have(sample.FieldPower) {
			t.Errorf("gpu %d: no power reading", g.Index)
		}
	}
	t.Logf("processes: %v", s.Processes())
}
