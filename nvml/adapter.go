//go:build cgo

package nvml

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/tpsmon/tpsmon/sample"
)

// Sampler reads GPUs through NVML. It is created by Open after a successful
// nvmlInit, so no NVML call is ever made without one (calling into an
// unloaded library aborts the process).
type Sampler struct {
	lib  gonvml.Interface
	devs []*device
	mu   sync.Mutex     // guards each device's busy state
	wg   sync.WaitGroup // reads in flight, waited for before Shutdown
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
	unsupported sample.Field

	// lastSeen is the raw timestamp of the newest utilization sample
	// taken, fed back to GetSamples; offset converts the driver's clock to
	// wall time where it is not epoch-based.
	lastSeen uint64
	offset   time.Duration
	offsetOK bool

	gpm     gonvml.GpmSample // the previous GPM sample; nil until taken
	gpmAt   time.Time
	gpmOK   bool // GpmQueryDeviceSupport said yes
	busy    bool // a call is still running past its deadline
	stuckAt time.Time

	// migs are the MIG instances of a GPU in MIG mode. Utilization does
	// not exist then (per GPU or per instance): only memory and GPM are
	// read per instance, power and the rest per GPU.
	migs []*migDevice
}

type migDevice struct {
	h     gonvml.Device
	uuid  string
	gi    int
	gpm   gonvml.GpmSample
	gpmAt time.Time
}

// gpmMu serializes every GPM call of the process: concurrent GpmSampleGet
// calls crashed drivers, even for different devices.
var gpmMu sync.Mutex

// CallTimeout bounds one device's reading; a device whose driver call
// hangs is reported as such while the others go on.
var CallTimeout = 2 * time.Second

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
		d := &device{h: h, index: i, uuid: uuid, name: name}
		if sup, ret := h.GpmQueryDeviceSupport(); ret == gonvml.SUCCESS && sup.IsSupportedDevice != 0 {
			d.gpmOK = true
		}
		if cur, _, ret := h.GetMigMode(); ret == gonvml.SUCCESS && cur == gonvml.DEVICE_MIG_ENABLE {
			d.migs = migDevices(h)
			d.unsupported |= sample.FieldUtil | sample.FieldMemUtil | fieldSamples
		}
		s.devs = append(s.devs, d)
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

// migDevices lists the MIG instances of a GPU in MIG mode.
func migDevices(h gonvml.Device) []*migDevice {
	n, ret := h.GetMaxMigDeviceCount()
	if ret != gonvml.SUCCESS {
		return nil
	}
	var out []*migDevice
	for i := range n {
		m, ret := h.GetMigDeviceHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue // an empty slot: ERROR_NOT_FOUND
		}
		uuid, ret := m.GetUUID()
		if ret != gonvml.SUCCESS {
			continue
		}
		gi, _ := m.GetGpuInstanceId()
		out = append(out, &migDevice{h: m, uuid: uuid, gi: gi})
	}
	return out
}

// memoryFacts reads a device's memory bus width and top memory clock.
func memoryFacts(h gonvml.Device) (bits int, mhz float64) {
	if w, ret := h.GetMemoryBusWidth(); ret == gonvml.SUCCESS {
		bits = int(w)
	}
	if c, ret := h.GetMaxClockInfo(gonvml.CLOCK_MEM); ret == gonvml.SUCCESS {
		mhz = float64(c)
	}
	return bits, mhz
}

// Facts returns what each open GPU says of itself: its name and the
// memory facts its peak bandwidth comes from. Asked when called (once at
// start by its user), not at Open: sampling needs none of it.
func (s *Sampler) Facts() []sample.Device {
	out := make([]sample.Device, len(s.devs))
	for i, d := range s.devs {
		bits, mhz := memoryFacts(d.h)
		out[i] = sample.Device{Index: d.index, UUID: d.uuid, Name: d.name, MemBusWidthBits: bits, MaxMemClockMHz: mhz}
	}
	return out
}

// Devices returns the number of GPUs sampled.
func (s *Sampler) Devices() int { return len(s.devs) }

// ErrTimeout marks a device whose driver call did not return in time.
var ErrTimeout = errors.New("NVML call did not return in time")

// Sample reads every open device, each with a deadline: a device whose
// call hangs carries ErrTimeout (and is not asked again until that call
// returns) while the others are read. Missing readings are absent from
// Has.
func (s *Sampler) Sample(now time.Time) []sample.GPU {
	out := make([]sample.GPU, len(s.devs))
	extra := make([][]sample.GPU, len(s.devs)) // MIG instances, after their GPU
	done := make(chan int, len(s.devs))
	pending := 0
	s.mu.Lock()
	for i, d := range s.devs {
		if d.busy {
			out[i] = sample.GPU{Time: now, Index: d.index, UUID: d.uuid, Name: d.name,
				Err: fmt.Errorf("gpu %d %s: %w (stuck since %s)", d.index, d.uuid, ErrTimeout, d.stuckAt.Format(time.RFC3339))}
			continue
		}
		d.busy = true
		pending++
		s.wg.Go(func() {
			smp := s.read(d, now)
			migs := s.readMIG(d, now)
			s.mu.Lock()
			d.busy = false
			extra[i] = migs
			s.mu.Unlock()
			out[i] = smp
			done <- i
		})
	}
	s.mu.Unlock()
	deadline := time.NewTimer(CallTimeout)
	defer deadline.Stop()
	got := make([]bool, len(s.devs))
	for pending > 0 {
		select {
		case i := <-done:
			got[i] = true
			pending--
		case <-deadline.C:
			// The late goroutines write into a slice nobody reads any more.
			res := make([]sample.GPU, len(out))
			s.mu.Lock()
			for i, d := range s.devs {
				if got[i] || !d.busy {
					continue
				}
				d.stuckAt = now
				res[i] = sample.GPU{Time: now, Index: d.index, UUID: d.uuid, Name: d.name,
					Err: fmt.Errorf("gpu %d %s: %w after %v", d.index, d.uuid, ErrTimeout, CallTimeout)}
			}
			s.mu.Unlock()
			for i := range out {
				if got[i] {
					res[i] = out[i]
				} else if res[i].UUID == "" {
					res[i] = sample.GPU{Time: now, Index: s.devs[i].index, UUID: s.devs[i].uuid, Name: s.devs[i].name,
						Err: fmt.Errorf("gpu %d: %w", s.devs[i].index, ErrTimeout)}
				}
			}
			return withMIG(res, got, extra, &s.mu)
		}
	}
	return withMIG(out, got, extra, &s.mu)
}

// withMIG appends the MIG instances read in time after the GPUs.
func withMIG(gpus []sample.GPU, got []bool, extra [][]sample.GPU, mu *sync.Mutex) []sample.GPU {
	mu.Lock()
	defer mu.Unlock()
	for i, e := range extra {
		if got[i] {
			gpus = append(gpus, e...)
		}
	}
	return gpus
}

func (s *Sampler) read(d *device, now time.Time) sample.GPU {
	smp := sample.GPU{Time: now, Index: d.index, UUID: d.uuid, Name: d.name}
	var fatal error
	// get records one reading: its value on success, NOT_SUPPORTED cached,
	// a lost GPU remembered as the device's error.
	get := func(f sample.Field, ret gonvml.Return, set func()) {
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
	want := func(f sample.Field) bool { return d.unsupported&f == 0 && fatal == nil }

	if want(sample.FieldUtil) {
		u, ret := d.h.GetUtilizationRates()
		get(sample.FieldUtil|sample.FieldMemUtil, ret, func() {
			smp.UtilPct, smp.MemUtilPct = float64(u.Gpu), float64(u.Memory)
		})
	}
	if want(fieldSamples) {
		s.readSamples(d, &smp, now)
	}
	if want(sample.FieldMemory) {
		m, ret := d.h.GetMemoryInfo()
		get(sample.FieldMemory, ret, func() {
			smp.MemUsedBytes, smp.MemTotalBytes = clampInt64(m.Used), clampInt64(m.Total)
		})
	}
	if want(sample.FieldPower) {
		mw, ret := d.h.GetPowerUsage()
		get(sample.FieldPower, ret, func() { smp.PowerW = float64(mw) / 1000 })
	}
	if want(sample.FieldEnergy) {
		mj, ret := d.h.GetTotalEnergyConsumption()
		get(sample.FieldEnergy, ret, func() { smp.EnergyMJ = clampInt64(mj) })
	}
	if want(sample.FieldTemp) {
		c, ret := d.h.GetTemperature(gonvml.TEMPERATURE_GPU)
		get(sample.FieldTemp, ret, func() { smp.TempC = float64(c) })
	}
	if want(sample.FieldSMClock) {
		mhz, ret := d.h.GetClockInfo(gonvml.CLOCK_SM)
		get(sample.FieldSMClock, ret, func() { smp.SMClockMHz = float64(mhz) })
	}
	if want(sample.FieldThrottle) {
		var bits uint64
		var ret gonvml.Return
		if s.eventReasons {
			bits, ret = d.h.GetCurrentClocksEventReasons()
		} else {
			bits, ret = d.h.GetCurrentClocksThrottleReasons()
		}
		get(sample.FieldThrottle, ret, func() { smp.Throttle = bits })
	}
	if fatal != nil {
		return sample.GPU{Time: now, Index: d.index, UUID: d.uuid, Name: d.name, Err: fatal}
	}
	if d.gpmOK {
		s.readGPM(d, &smp, now)
	}
	return smp
}

// readSamples takes the driver's utilization samples newer than the last
// one seen. Their timestamps are CPU microseconds, since the epoch on most
// platforms but since boot on some: far from now, they are shifted so the
// newest is now, while the raw value is what goes back as lastSeen.
func (s *Sampler) readSamples(d *device, smp *sample.GPU, now time.Time) {
	vt, ss, ret := d.h.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, d.lastSeen)
	switch {
	case ret == gonvml.ERROR_NOT_FOUND:
		return // nothing new (an idle GPU's buffer runs dry): the 1 Hz reading stands
	case ret == gonvml.ERROR_NOT_SUPPORTED:
		d.unsupported |= fieldSamples
		return
	case ret != gonvml.SUCCESS || len(ss) == 0:
		return
	}
	var newest uint64
	for _, x := range ss {
		newest = max(newest, x.TimeStamp)
	}
	if !d.offsetOK {
		wall := time.UnixMicro(int64(newest))
		if diff := now.Sub(wall); diff > 24*time.Hour || diff < -24*time.Hour {
			d.offset = diff
		}
		d.offsetOK = true
	}
	for _, x := range ss {
		if x.TimeStamp <= d.lastSeen {
			continue
		}
		var v float64
		switch vt {
		case gonvml.VALUE_TYPE_UNSIGNED_INT:
			v = float64(binary.LittleEndian.Uint32(x.SampleValue[:4]))
		case gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
			v = float64(binary.LittleEndian.Uint64(x.SampleValue[:]))
		case gonvml.VALUE_TYPE_DOUBLE:
			v = math.Float64frombits(binary.LittleEndian.Uint64(x.SampleValue[:]))
		default:
			continue
		}
		smp.UtilSamples = append(smp.UtilSamples, sample.UtilSample{Time: time.UnixMicro(int64(x.TimeStamp)).Add(d.offset), Pct: v})
	}
	d.lastSeen = max(d.lastSeen, newest)
	sort.Slice(smp.UtilSamples, func(a, b int) bool { return smp.UtilSamples[a].Time.Before(smp.UtilSamples[b].Time) })
}

// readMIG reads each MIG instance of d: its memory, and GPM where the
// GPU has it. Never a utilization: MIG has none.
func (s *Sampler) readMIG(d *device, now time.Time) []sample.GPU {
	var out []sample.GPU
	for _, m := range d.migs {
		smp := sample.GPU{Time: now, Index: d.index, UUID: m.uuid, Name: d.name + " MIG", Instance: fmt.Sprintf("gi%d", m.gi)}
		if mem, ret := m.h.GetMemoryInfo(); ret == gonvml.SUCCESS {
			smp.MemUsedBytes, smp.MemTotalBytes = clampInt64(mem.Used), clampInt64(mem.Total)
			smp.Has |= sample.FieldMemory
		}
		if d.gpmOK && (m.gpm == nil || now.Sub(m.gpmAt) >= gpmInterval) {
			s.gpmMetrics(&m.gpm, &m.gpmAt, now, func(sample gonvml.GpmSample) gonvml.Return {
				return d.h.GpmMigSampleGet(m.gi, sample)
			}, &smp)
		}
		out = append(out, smp)
	}
	return out
}

// gpmInterval keeps GPM samples apart: metrics over less than ~1 s are noise.
const gpmInterval = time.Second

// readGPM takes a GPM sample and, from the previous one, the activity
// metrics of the time between.
func (s *Sampler) readGPM(d *device, smp *sample.GPU, now time.Time) {
	if d.gpm != nil && now.Sub(d.gpmAt) < gpmInterval {
		return
	}
	if ret := s.gpmMetrics(&d.gpm, &d.gpmAt, now, d.h.GpmSampleGet, smp); ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_NO_PERMISSION {
		d.gpmOK = false // e.g. profiling restricted to admins
	}
}

// gpmMetrics takes a new GPM sample with get and computes the metrics
// since *prev, which it then replaces. All GPM calls are serialized.
func (s *Sampler) gpmMetrics(prev *gonvml.GpmSample, prevAt *time.Time, now time.Time,
	get func(gonvml.GpmSample) gonvml.Return, smp *sample.GPU) gonvml.Return {
	gpmMu.Lock()
	defer gpmMu.Unlock()
	cur, ret := s.lib.GpmSampleAlloc()
	if ret != gonvml.SUCCESS {
		return ret
	}
	if ret := get(cur); ret != gonvml.SUCCESS {
		cur.Free()
		return ret
	}
	old := *prev
	*prev, *prevAt = cur, now
	if old == nil {
		return gonvml.SUCCESS
	}
	defer old.Free()
	mg := gonvml.GpmMetricsGetType{NumMetrics: 4, Sample1: old, Sample2: cur}
	ids := []gonvml.GpmMetricId{gonvml.GPM_METRIC_SM_UTIL, gonvml.GPM_METRIC_SM_OCCUPANCY,
		gonvml.GPM_METRIC_ANY_TENSOR_UTIL, gonvml.GPM_METRIC_DRAM_BW_UTIL}
	for i, id := range ids {
		mg.Metrics[i].MetricId = uint32(id)
	}
	if ret := s.lib.GpmMetricsGet(&mg); ret != gonvml.SUCCESS {
		return ret
	}
	dst := []*float64{&smp.SMActive, &smp.SMOccupancy, &smp.TensorActive, &smp.DRAMActive}
	for i := range ids {
		if gonvml.Return(mg.Metrics[i].NvmlReturn) != gonvml.SUCCESS {
			return gonvml.Return(mg.Metrics[i].NvmlReturn)
		}
		*dst[i] = mg.Metrics[i].Value
	}
	smp.Has |= sample.FieldGPM
	return gonvml.SUCCESS
}

// Close shuts NVML down once the reads in flight returned; if one still
// hangs after a few seconds, NVML is left loaded rather than unloaded
// under it (which would abort the process).
func (s *Sampler) Close() error {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * CallTimeout):
		return fmt.Errorf("nvml: a driver call still hangs; not shutting NVML down")
	}
	gpmMu.Lock()
	for _, d := range s.devs {
		if d.gpm != nil {
			d.gpm.Free()
			d.gpm = nil
		}
		for _, m := range d.migs {
			if m.gpm != nil {
				m.gpm.Free()
				m.gpm = nil
			}
		}
	}
	gpmMu.Unlock()
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

// Processes returns, per GPU UUID, the PIDs of the compute processes NVML
// sees on it (host PIDs when tpsmon runs in the host's PID namespace).
// The call is expensive: ask every few windows, not every sample.
func (s *Sampler) Processes() map[string][]int {
	out := map[string][]int{}
	for _, d := range s.devs {
		s.mu.Lock()
		busy := d.busy
		s.mu.Unlock()
		if busy {
			continue
		}
		ps, ret := d.h.GetComputeRunningProcesses()
		if ret != gonvml.SUCCESS {
			continue
		}
		for _, p := range ps {
			out[d.uuid] = append(out[d.uuid], int(p.Pid))
		}
	}
	return out
}
