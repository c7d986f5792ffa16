package sample

// Physical bounds of one GPU's readings. A reading beyond them is a driver
// glitch or a corrupted recording (the power of a misprinted CSV row became
// 1e300 J of energy), not data: it is dropped from the sample and counted.
const (
	// MaxPowerW bounds a GPU's power draw: the largest modules draw a few
	// kW; 10 kW leaves room and still refuses a garbage value.
	MaxPowerW = 10_000
	// MaxMemoryBytes bounds a GPU's memory (16 TiB; the largest have
	// under 200 GB).
	MaxMemoryBytes = 1 << 44
	// MaxTempC and MinTempC bound a temperature sensor.
	MinTempC, MaxTempC = -50, 200
	// MaxSMClockMHz bounds an SM clock.
	MaxSMClockMHz = 10_000
)

// Check drops from s the readings no GPU can give (NaN, ±Inf, a negative
// or out-of-range percentage, power, memory, temperature or clock beyond
// its bound, more memory used than there is) and says what it dropped,
// each as a Discard named by its field.
func (s *GPU) Check() []Discard {
	var out []Discard
	drop := func(f Field, series string, r Reason) {
		s.Has &^= f
		out = append(out, Discard{Series: series, Reason: r})
	}
	within := func(f Field, series string, lo, hi float64, vs ...float64) {
		if !s.Have(f) {
			return
		}
		for _, v := range vs {
			if r, ok := RangeReason(v, lo, hi); !ok {
				drop(f, series, r)
				return
			}
		}
	}
	within(FieldUtil, "gpu_util", 0, 100, s.UtilPct)
	within(FieldMemUtil, "gpu_mem_util", 0, 100, s.MemUtilPct)
	within(FieldGPM, "gpu_gpm", 0, 100, s.SMActive, s.SMOccupancy, s.TensorActive, s.DRAMActive)
	within(FieldPower, "gpu_power", 0, MaxPowerW, s.PowerW)
	within(FieldTemp, "gpu_temp", MinTempC, MaxTempC, s.TempC)
	within(FieldSMClock, "gpu_sm_clock", 0, MaxSMClockMHz, s.SMClockMHz)
	within(FieldMemory, "gpu_memory", 0, MaxMemoryBytes, float64(s.MemUsedBytes), float64(s.MemTotalBytes))
	if s.Have(FieldMemory) && s.MemUsedBytes > s.MemTotalBytes {
		drop(FieldMemory, "gpu_memory", Huge)
	}
	if s.Have(FieldEnergy) && s.EnergyMJ < 0 {
		drop(FieldEnergy, "gpu_energy", Negative)
	}
	kept := s.UtilSamples[:0]
	for _, u := range s.UtilSamples {
		if r, ok := RangeReason(u.Pct, 0, 100); !ok {
			out = append(out, Discard{Series: "gpu_util", Reason: r})
			continue
		}
		kept = append(kept, u)
	}
	s.UtilSamples = kept
	return out
}
