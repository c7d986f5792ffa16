package window

import (
	"fmt"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/gpu"
)

// BenchmarkWindow feeds one 10 s window of a node (8 GPUs and 2 servers
// sampled at 1 Hz) and closes it: the joiner's work per window.
func BenchmarkWindow(b *testing.B) {
	j := New(Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Host: "n",
		Start: time.Unix(0, 0)}, []Server{{Name: "a", Engine: "vllm", GPUs: []string{"0", "1", "2", "3"}}, {Name: "b", Engine: "sglang", GPUs: []string{"4", "5", "6", "7"}}})
	uuids := make([]string, 8)
	for g := range uuids {
		uuids[g] = fmt.Sprintf("GPU-%d", g)
	}
	b.ReportAllocs()
	t := time.Unix(0, 0)
	for i := range b.N {
		for s := range 10 {
			now := t.Add(time.Duration(s) * time.Second)
			for g := range 8 {
				j.AddGPU(gpu.Sample{Time: now, Index: g, UUID: uuids[g], UtilPct: 70, PowerW: 500, EnergyMJ: int64(i*10+s) * 500_000,
					MemUsedBytes: 70 << 30, MemTotalBytes: 80 << 30, TempC: 60, SMClockMHz: 1900,
					Has: gpu.FieldUtil | gpu.FieldPower | gpu.FieldEnergy | gpu.FieldMemory | gpu.FieldTemp | gpu.FieldSMClock})
			}
			for _, name := range []string{"a", "b"} {
				var smp collector.Sample
				smp.Time = now
				smp.SetCounter(collector.GenerationTokens, float64(i*10+s)*1000)
				smp.SetGauge(collector.Running, 16)
				j.AddServer(name, smp)
			}
		}
		t = t.Add(10 * time.Second)
		if n := len(j.Flush(t.Add(5 * time.Second))); n != 10 {
			b.Fatalf("%d points", n)
		}
	}
}
