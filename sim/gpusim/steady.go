package gpusim

import (
	"fmt"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Steady is two GPUs at 80% and 300 W whose energy counter advances with
// wall time from Start: a backend whose readings a test knows.
type Steady struct{ Start time.Time }

// Sample reads both GPUs at now.
func (g Steady) Sample(now time.Time) []sample.GPU {
	out := make([]sample.GPU, 2)
	for i := range out {
		out[i] = sample.GPU{Time: now, Index: i, UUID: fmt.Sprintf("GPU-test-%d", i), Name: "Test H100",
			UtilPct: 80, MemUtilPct: 40, MemUsedBytes: 60 << 30, MemTotalBytes: 80 << 30, PowerW: 300,
			EnergyMJ: int64(300 * now.Sub(g.Start).Seconds() * 1000), TempC: 60, SMClockMHz: 1800, Throttle: 0x4,
			Has: sample.FieldUtil | sample.FieldMemUtil | sample.FieldMemory | sample.FieldPower | sample.FieldEnergy |
				sample.FieldTemp | sample.FieldSMClock | sample.FieldThrottle}
	}
	return out
}

// Close holds nothing.
func (Steady) Close() error { return nil }
