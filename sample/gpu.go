package sample

import "time"

// Field names one optional reading of a Sample. A reading the device does
// not offer is absent from Has, never zero.
type Field uint16

// The optional readings of a Sample.
const (
	FieldUtil Field = 1 << iota
	FieldMemUtil
	FieldMemory
	FieldPower
	FieldEnergy
	FieldTemp
	FieldSMClock
	FieldThrottle
	// FieldGPM marks the GPM readings (Hopper and newer): SM activity,
	// SM occupancy, tensor activity and DRAM bandwidth use.
	FieldGPM
)

// UtilSample is one entry of the driver's utilization sample buffer.
type UtilSample struct {
	Time time.Time
	Pct  float64
}

// GPU is one reading of one GPU: what a backend takes of each device (package nvml fills it on real hardware, without this package importing go-nvml).
type GPU struct {
	Time  time.Time
	Index int
	UUID  string
	Name  string
	// Instance names a MIG instance of GPU Index ("gi1"); empty for a
	// whole GPU.
	Instance string

	UtilPct       float64 // % of the driver's sample period in which a kernel ran
	MemUtilPct    float64 // % of the period in which device memory was read or written
	MemUsedBytes  int64
	MemTotalBytes int64
	PowerW        float64
	EnergyMJ      int64 // cumulative since the driver loaded; resets on reload
	TempC         float64
	SMClockMHz    float64
	Throttle      uint64 // clock event reason bitmask
	// UtilSamples are the driver's own utilization samples since the last
	// reading, oldest first: every sample of a window, not one per second.
	UtilSamples []UtilSample
	// GPM readings over the time since the previous sample, in %.
	SMActive, SMOccupancy, TensorActive, DRAMActive float64

	Has Field
	// Err is set when the device could not be read at all (lost, reset
	// required); the other fields are then meaningless.
	Err error
}

// Have reports whether the sample carries field f.
func (s *GPU) Have(f Field) bool { return s.Has&f != 0 }
