//go:build cgo

package nvml

import (
	"errors"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/tpsmon/tpsmon/sample"
)

// h100 returns the dgxh100 fake with every call tpsmon samples filled in;
// device i reads utilization 10*i, power 100+i W, energy 1000*i mJ.
func h100(t *testing.T) *server.Server {
	t.Helper()
	srv := dgxh100.New()
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
			return gonvml.Utilization{Gpu: uint32(10 * i), Memory: uint32(5 * i)}, gonvml.SUCCESS
		}
		dev.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
			return gonvml.Memory{Total: 80 << 30, Used: uint64(i) << 30}, gonvml.SUCCESS
		}
		dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return uint32(100_000 + 1000*i), gonvml.SUCCESS }
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return uint64(1000 * i), gonvml.SUCCESS }
		dev.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 40, gonvml.SUCCESS }
		dev.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 1980, gonvml.SUCCESS }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, gonvml.Return) { return 0x4, gonvml.SUCCESS }
		dev.GetSamplesFunc = func(gonvml.SamplingType, uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
			return 0, nil, gonvml.ERROR_NOT_SUPPORTED
		}
		dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
			return gonvml.GpmSupport{IsSupportedDevice: 0}, gonvml.SUCCESS
		}
	}
	return srv
}

func TestSampleAllDevices(t *testing.T) {
	srv := h100(t)
	s, err := Open(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Unix(1_700_000_000, 0)
	got := s.Sample(now)
	if len(got) != 8 {
		t.Fatalf("got %d samples, want 8", len(got))
	}
	for i, g := range got {
		if g.Err != nil {
			t.Fatalf("gpu %d: %v", i, g.Err)
		}
		uuid, _ := srv.Devices[i].GetUUID()
		if g.Index != i || g.UUID != uuid || g.Name != "NVIDIA H100 80GB HBM3" {
			t.Errorf("gpu %d identity = %d %q %q", i, g.Index, g.UUID, g.Name)
		}
		if g.UtilPct != float64(10*i) || g.MemUtilPct != float64(5*i) {
			t.Errorf("gpu %d util = %v/%v", i, g.UtilPct, g.MemUtilPct)
		}
		if g.PowerW != 100+float64(i) || g.EnergyMJ != int64(1000*i) {
			t.Errorf("gpu %d power %v energy %v", i, g.PowerW, g.EnergyMJ)
		}
		if g.MemUsedBytes != int64(i)<<30 || g.MemTotalBytes != 80<<30 {
			t.Errorf("gpu %d memory %d/%d", i, g.MemUsedBytes, g.MemTotalBytes)
		}
		if g.TempC != 40 || g.SMClockMHz != 1980 || g.Throttle != 0x4 {
			t.Errorf("gpu %d temp/clock/throttle = %v %v %#x", i, g.TempC, g.SMClockMHz, g.Throttle)
		}
		all := sample.FieldUtil | sample.FieldMemUtil | sample.FieldMemory | sample.FieldPower | sample.FieldEnergy | sample.FieldTemp | sample.FieldSMClock | sample.FieldThrottle
		if g.Has != all {
			t.Errorf("gpu %d has %b, want %b", i, g.Has, all)
		}
		if !g.Time.Equal(now) {
			t.Errorf("gpu %d time %v", i, g.Time)
		}
	}
}

func TestDeviceSelection(t *testing.T) {
	srv := h100(t)
	uuid5, _ := srv.Devices[5].GetUUID()
	s, err := Open(srv, []string{"2", uuid5})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Sample(time.Now())
	if len(got) != 2 || got[0].Index != 2 || got[1].Index != 5 {
		t.Fatalf("selected %+v", got)
	}

	_, err = Open(h100(t), []string{"9"})
	if err == nil {
		t.Fatal("selecting a GPU that does not exist succeeded")
	}
}

func TestNotSupportedIsAbsentAndAskedOnce(t *testing.T) {
	srv := h100(t)
	dev := srv.Devices[0].(*server.Device)
	dev.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	s, err := Open(srv, []string{"0"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		g := s.Sample(time.Now())[0]
		if g.Have(sample.FieldEnergy) || g.EnergyMJ != 0 {
			t.Fatalf("unsupported energy reported: %+v", g)
		}
		if !g.Have(sample.FieldPower) {
			t.Fatal("power missing")
		}
	}
	if n := len(dev.GetTotalEnergyConsumptionCalls()); n != 1 {
		t.Errorf("NOT_SUPPORTED energy asked %d times, want 1", n)
	}
}

func TestLostGPUMarkedOthersGoOn(t *testing.T) {
	srv := h100(t)
	srv.Devices[3].(*server.Device).GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_GPU_IS_LOST }
	s, err := Open(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Sample(time.Now())
	for i, g := range got {
		if i == 3 {
			if !errors.Is(g.Err, gonvml.ERROR_GPU_IS_LOST) {
				t.Errorf("gpu 3 err = %v, want GPU_IS_LOST", g.Err)
			}
			continue
		}
		if g.Err != nil || !g.Have(sample.FieldPower) {
			t.Errorf("gpu %d affected by gpu 3: %+v", i, g)
		}
	}
}

func TestThrottleFallsBackOnOldDriver(t *testing.T) {
	srv := h100(t)
	srv.LookupSymbolFunc = func(sym string) error {
		if sym == "nvmlDeviceGetCurrentClocksEventReasons" {
			return errors.New("undefined symbol")
		}
		return nil
	}
	for _, d := range srv.Devices {
		d.(*server.Device).GetCurrentClocksThrottleReasonsFunc = func() (uint64, gonvml.Return) { return 0x40, gonvml.SUCCESS }
	}
	s, err := Open(srv, []string{"0"})
	if err != nil {
		t.Fatal(err)
	}
	if g := s.Sample(time.Now())[0]; g.Throttle != 0x40 {
		t.Errorf("throttle = %#x, want the deprecated call's 0x40", g.Throttle)
	}
}

func TestInitFailures(t *testing.T) {
	for _, ret := range []gonvml.Return{gonvml.ERROR_LIBRARY_NOT_FOUND, gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_UNKNOWN} {
		lib := &mock.Interface{InitFunc: func() gonvml.Return { return ret }}
		_, err := Open(lib, nil)
		if !errors.Is(err, ErrNoDriver) || !errors.Is(err, ret) {
			t.Errorf("Init %v: err = %v, want ErrNoDriver wrapping it", ret, err)
		}
		// Nothing else may be called: the library is not loaded.
		if n := len(lib.DeviceGetCountCalls()); n != 0 {
			t.Errorf("Init %v: DeviceGetCount called %d times after a failed Init", ret, n)
		}
	}
}

func TestOpenSystemWithoutDriver(t *testing.T) {
	s, err := OpenSystem(nil)
	if err == nil { // a machine with a GPU: the real library must work
		if len(s.Sample(time.Now())) != s.Devices() {
			t.Error("real NVML returned fewer samples than devices")
		}
		s.Close()
		return
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenSystem without a driver: %v, want ErrNoDriver", err)
	}
}
