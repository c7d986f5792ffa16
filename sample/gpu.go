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

// Device is what a GPU says of itself once: its memory bus width and
// top memory clock, from which its peak memory bandwidth. Zero is unknown.
type Device struct {
	Index int
	UUID  string
	Name  string
	// MemBusWidthBits and MaxMemClockMHz are NVML's
	// nvmlDeviceGetMemoryBusWidth and the CLOCK_MEM maximum.
	MemBusWidthBits int
	MaxMemClockMHz  float64
}

// PeakBandwidthGBps is bus width × top memory clock × 2 transfers a
// clock, in 10^9 bytes/s: NVML reports HBM's and GDDR6/6X/7's memory
// clock both at half the data rate (H100 SXM: 5120 bits × 2619 MHz →
// 3352 GB/s; RTX 4090: 384 bits × 10501 MHz → 1008 GB/s). 0 when either
// is unknown.
func (d Device) PeakBandwidthGBps() float64 {
	if d.MemBusWidthBits <= 0 || d.MaxMemClockMHz <= 0 {
		return 0
	}
	return float64(d.MemBusWidthBits) / 8 * d.MaxMemClockMHz * 2 / 1000
}
