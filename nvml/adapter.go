//go:build cgo

package nvml

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sampler reads GPUs through NVML. It is created by Open after a successful
// nvmlInit, so no NVML call is ever made without one (calling into an
// unloaded library aborts the process).
type Sampler struct {
	lib  gonvml.Interface
	devs []*device
	// eventReasons is false when the driver predates
	// nvmlDeviceGetCurrentClocksEventReasons; the deprecated throttle call
	// is used then.
	eventReasons bool
}

type device struct {
	h     gonvml.Device
	index int
	uuid  string
	name  string
	// unsupported caches NOT_SUPPORTED answers so they are asked once.
	unsupported Field
}

// OpenSystem loads the host's NVML library and opens the listed devices
// (indexes or UUIDs; empty = all).
func OpenSystem(devices []string) (*Sampler, error) {
	return Open(gonvml.New(), devices)
}

// Open initialises lib and opens the listed devices (indexes or UUIDs;
// empty = all). A missing or unusable driver gives an error wrapping
// ErrNoDriver.
func Open(lib gonvml.Interface, devices []string) (*Sampler, error) {
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		return nil, initError(ret)
	}
	s := &Sampler{lib: lib}
	if err := s.enumerate(devices); err != nil {
		lib.Shutdown()
		return nil, err
	}
	s.eventReasons = lib.Extensions().LookupSymbol("nvmlDeviceGetCurrentClocksEventReasons") == nil
	return s, nil
}

func initError(ret gonvml.Return) error {
	switch ret {
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: libnvidia-ml.so.1 could not be loaded (%w)", ErrNoDriver, ret)
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: the kernel driver is not loaded (%w)", ErrNoDriver, ret)
	case gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fmt.Errorf("%w: library and kernel module versions differ; reboot or reload the driver (%w)", ErrNoDriver, ret)
	case gonvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("%w: no permission to open /dev/nvidia* (%w)", ErrNoDriver, ret)
	}
	return fmt.Errorf("%w: nvmlInit failed: %w", ErrNoDriver, ret)
}

func (s *Sampler) enumerate(want []string) error {
	n, ret := s.lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: counting devices: %w", ret)
	}
	found := make(map[string]bool, len(want))
	for i := 0; i < n; i++ {
		h, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("nvml: device %d: %w", i, ret)
		}
		uuid, ret := h.GetUUID()
		if ret != gonvml.SUCCESS {
			return fmt.Errorf("nvml: device %d uuid: %w", i, ret)
		}
		if len(want) > 0 && !selected(want, i, uuid, found) {
			continue
		}
		name, ret := h.GetName()
		if ret != gonvml.SUCCESS {
			name = ""
		}
		s.devs = append(s.devs, &device{h: h, index: i, uuid: uuid, name: name})
	}
	for _, w := range want {
		if !found[w] {
			return fmt.Errorf("nvml: gpu.devices lists %q, which is not on this node (%d GPUs)", w, n)
		}
	}
	return nil
}

func selected(want []string, index int, uuid string, found map[string]bool) bool {
	for _, w := range want {
		if w == uuid || w == strconv.Itoa(index) {
			found[w] = true
			return true
		}
	}
	return false
}

// Devices returns the number of GPUs sampled.
func (s *Sampler) Devices() int { return len(s.devs) }

// Sample reads every open device. A device that fails as a whole carries
// Err; missing readings are absent from Has.
func (s *Sampler) Sample(now time.Time) []Sample {
	out := make([]Sample, len(s.devs))
	for i, d := range s.devs {
		out[i] = s.read(d, now)
	}
	return out
}

func (s *Sampler) read(d *device, now time.Time) Sample {
	smp := Sample{Time: now, Index: d.index, UUID: d.uuid, Name: d.name}
	var fatal error
	// get records one reading: its value on success, NOT_SUPPORTED cached,
	// a lost GPU remembered as the device's error.
	get := func(f Field, ret gonvml.Return, set func()) {
		switch {
		case ret == gonvml.SUCCESS:
			smp.Has |= f
			set()
		case ret == gonvml.ERROR_NOT_SUPPORTED:
			d.unsupported |= f
		case errors.Is(ret, gonvml.ERROR_GPU_IS_LOST), errors.Is(ret, gonvml.ERROR_RESET_REQUIRED):
			if fatal == nil {
				fatal = fmt.Errorf("gpu %d %s: %w", d.index, d.uuid, ret)
			}
		}
	}
	want := func(f Field) bool { return d.unsupported&f == 0 && fatal == nil }

	if want(FieldUtil) {
		u, ret := d.h.GetUtilizationRates()
		get(FieldUtil|FieldMemUtil, ret, func() {
			smp.UtilPct, smp.MemUtilPct = float64(u.Gpu), float64(u.Memory)
		})
	}
	if want(FieldMemory) {
		m, ret := d.h.GetMemoryInfo()
		get(FieldMemory, ret, func() {
			smp.MemUsedBytes, smp.MemTotalBytes = clampInt64(m.Used), clampInt64(m.Total)
		})
	}
	if want(FieldPower) {
		mw, ret := d.h.GetPowerUsage()
		get(FieldPower, ret, func() { smp.PowerW = float64(mw) / 1000 })
	}
	if want(FieldEnergy) {
		mj, ret := d.h.GetTotalEnergyConsumption()
		get(FieldEnergy, ret, func() { smp.EnergyMJ = clampInt64(mj) })
	}
	if want(FieldTemp) {
		c, ret := d.h.GetTemperature(gonvml.TEMPERATURE_GPU)
		get(FieldTemp, ret, func() { smp.TempC = float64(c) })
	}
	if want(FieldSMClock) {
		mhz, ret := d.h.GetClockInfo(gonvml.CLOCK_SM)
		get(FieldSMClock, ret, func() { smp.SMClockMHz = float64(mhz) })
	}
	if want(FieldThrottle) {
		var bits uint64
		var ret gonvml.Return
		if s.eventReasons {
			bits, ret = d.h.GetCurrentClocksEventReasons()
		} else {
			bits, ret = d.h.GetCurrentClocksThrottleReasons()
		}
		get(FieldThrottle, ret, func() { smp.Throttle = bits })
	}
	if fatal != nil {
		return Sample{Time: now, Index: d.index, UUID: d.uuid, Name: d.name, Err: fatal}
	}
	return smp
}

// Close shuts NVML down. Call it once, after every Sample call returned.
func (s *Sampler) Close() error {
	if ret := s.lib.Shutdown(); ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml: shutdown: %w", ret)
	}
	return nil
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
