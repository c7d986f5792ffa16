// Package gpusim simulates GPUs for demo, tests and the sim backend.
package gpusim

import (
	"fmt"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Sim is a set of simulated H100-class GPUs whose activity follows a load
// profile (0..1), the same one that drives the simulated inference server,
// so that demo output and tests show GPUs and tokens moving together.
type Sim struct {
	load  func(time.Time) float64
	n     int
	uuids []string // made once: a sample a second per GPU would format them anew

	mu       sync.Mutex
	last     time.Time
	energyMJ []float64
}

// New returns n simulated GPUs following load.
func New(n int, load func(time.Time) float64) *Sim {
	uuids := make([]string, n)
	for i := range uuids {
		uuids[i] = fmt.Sprintf("GPU-5a1e0000-0000-4000-8000-%012d", i)
	}
	return &Sim{load: load, n: n, uuids: uuids, energyMJ: make([]float64, n)}
}

const (
	simMemTotal = 80 << 30
	simIdleW    = 70.0
	simMaxW     = 690.0
)

// Sample reads every simulated GPU at now.
func (s *Sim) Sample(now time.Time) []sample.GPU {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := clamp01(s.load(now))
	out := make([]sample.GPU, s.n)
	for i := range out {
		// GPUs of one server are not perfectly balanced.
		skew := 1 - 0.04*float64(i%4)
		li := l * skew
		power := simIdleW + (simMaxW-simIdleW)*li
		if !s.last.IsZero() && now.After(s.last) {
			s.energyMJ[i] += power * now.Sub(s.last).Seconds() * 1000
		}
		util := 0.0
		if li > 0 {
			util = 30 + 68*li
		}
		out[i] = sample.GPU{
			Time:          now,
			Index:         i,
			UUID:          s.uuids[i],
			Name:          "Simulated H100 80GB HBM3",
			UtilPct:       util,
			MemUtilPct:    util * 0.55,
			MemUsedBytes:  int64(0.9 * simMemTotal), // inference servers preallocate the KV cache
			MemTotalBytes: simMemTotal,
			PowerW:        power,
			EnergyMJ:      int64(s.energyMJ[i]),
			TempC:         34 + 40*li,
			SMClockMHz:    1980 - 200*li,
			Has:           sample.FieldUtil | sample.FieldMemUtil | sample.FieldMemory | sample.FieldPower | sample.FieldEnergy | sample.FieldTemp | sample.FieldSMClock | sample.FieldThrottle,
		}
		if li == 0 {
			out[i].Throttle = 0x1 // GpuIdle
		}
	}
	s.last = now
	return out
}

// Close implements the sampler contract; a simulation holds nothing.
func (s *Sim) Close() error { return nil }

func clamp01(v float64) float64 {
	switch {
	case v < 0:
		return 0
	case v > 1:
		return 1
	}
	return v
}
