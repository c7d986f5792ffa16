//go:build cgo

package nvml

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/tpsmon/tpsmon/sample"
)

func utilSample(tsMicro uint64, pct uint32) gonvml.Sample {
	var s gonvml.Sample
	s.TimeStamp = tsMicro
	binary.LittleEndian.PutUint32(s.SampleValue[:4], pct)
	return s
}

func TestUtilizationSampleBuffer(t *testing.T) {
	now := time.Unix(1_700_000_100, 0)
	base := uint64(now.UnixMicro())
	tests := []struct {
		name     string
		bufs     [][]gonvml.Sample // one answer per call; nil = NOT_FOUND
		ret      gonvml.Return
		wantLast []uint64 // lastSeen passed to each call
		want     []int    // samples returned per call
	}{
		{
			name: "unsorted, then only newer ones",
			bufs: [][]gonvml.Sample{
				{utilSample(base-100_000, 40), utilSample(base-300_000, 20), utilSample(base-200_000, 30)},
				{utilSample(base+100_000, 50)},
			},
			ret:      gonvml.SUCCESS,
			wantLast: []uint64{0, base - 100_000},
			want:     []int{3, 1},
		},
		{name: "empty buffer of an idle GPU", bufs: [][]gonvml.Sample{nil}, ret: gonvml.ERROR_NOT_FOUND, wantLast: []uint64{0}, want: []int{0}},
		{name: "not supported: asked once", bufs: [][]gonvml.Sample{nil, nil}, ret: gonvml.ERROR_NOT_SUPPORTED, wantLast: []uint64{0}, want: []int{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := h100(t)
			dev := srv.Devices[0].(*server.Device)
			var seen []uint64
			call := 0
			dev.GetSamplesFunc = func(st gonvml.SamplingType, last uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
				seen = append(seen, last)
				b := tt.bufs[min(call, len(tt.bufs)-1)]
				call++
				return gonvml.VALUE_TYPE_UNSIGNED_INT, b, tt.ret
			}
			s, err := Open(srv, []string{"0"})
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range tt.want {
				got := s.Sample(now)[0]
				if len(got.UtilSamples) != n {
					t.Fatalf("call %d: %d samples, want %d", i, len(got.UtilSamples), n)
				}
				for j := 1; j < len(got.UtilSamples); j++ {
					if got.UtilSamples[j].Time.Before(got.UtilSamples[j-1].Time) {
						t.Error("samples not in time order")
					}
				}
				if !got.Have(sample.FieldUtil) {
					t.Error("the 1 Hz reading is missing")
				}
			}
			if len(seen) != len(tt.wantLast) {
				t.Fatalf("GetSamples called %d times, want %d", len(seen), len(tt.wantLast))
			}
			for i := range seen {
				if seen[i] != tt.wantLast[i] {
					t.Errorf("call %d passed lastSeen %d, want %d", i, seen[i], tt.wantLast[i])
				}
			}
		})
	}
}

func TestBootRelativeSampleClock(t *testing.T) {
	srv := h100(t)
	dev := srv.Devices[0].(*server.Device)
	// 1000 s since boot, not since 1970.
	dev.GetSamplesFunc = func(gonvml.SamplingType, uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
		return gonvml.VALUE_TYPE_UNSIGNED_INT, []gonvml.Sample{utilSample(1_000_000_000, 70)}, gonvml.SUCCESS
	}
	s, _ := Open(srv, []string{"0"})
	now := time.Unix(1_700_000_000, 0)
	got := s.Sample(now)[0].UtilSamples
	if len(got) != 1 || !got[0].Time.Equal(now) {
		t.Errorf("boot-relative sample placed at %v, want now", got)
	}
}

func TestGPM(t *testing.T) {
	t.Run("supported", func(t *testing.T) {
		srv := h100(t)
		var mu sync.Mutex
		allocs, frees := 0, 0
		srv.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
			mu.Lock()
			allocs++
			mu.Unlock()
			return &mock.GpmSample{FreeFunc: func() gonvml.Return {
				mu.Lock()
				frees++
				mu.Unlock()
				return gonvml.SUCCESS
			}}, gonvml.SUCCESS
		}
		srv.GpmMetricsGetFunc = func(m *gonvml.GpmMetricsGetType) gonvml.Return {
			for i := range m.NumMetrics {
				m.Metrics[i].Value = float64(10 * (i + 1))
				m.Metrics[i].NvmlReturn = uint32(gonvml.SUCCESS)
			}
			return gonvml.SUCCESS
		}
		for _, d := range srv.Devices {
			dev := d.(*server.Device)
			dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
				return gonvml.GpmSupport{IsSupportedDevice: 1}, gonvml.SUCCESS
			}
			dev.GpmSampleGetFunc = func(gonvml.GpmSample) gonvml.Return { return gonvml.SUCCESS }
		}
		s, err := Open(srv, nil)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Unix(1_700_000_000, 0)
		first := s.Sample(t0)
		if first[0].Have(sample.FieldGPM) {
			t.Error("GPM metrics from a single sample")
		}
		second := s.Sample(t0.Add(time.Second))
		for _, g := range second {
			if !g.Have(sample.FieldGPM) || g.SMActive != 10 || g.SMOccupancy != 20 || g.TensorActive != 30 || g.DRAMActive != 40 {
				t.Errorf("gpu %d GPM %v %v %v %v", g.Index, g.SMActive, g.SMOccupancy, g.TensorActive, g.DRAMActive)
			}
		}
		s.Close()
		if allocs != frees || allocs != 16 {
			t.Errorf("%d GPM samples allocated, %d freed; want 16 each", allocs, frees)
		}
		// The GPM calls were serialized process-wide: the mock records
		// them; a data race would show under -race.
		if n := len(srv.GpmMetricsGetCalls()); n != 8 {
			t.Errorf("GpmMetricsGet called %d times, want 8", n)
		}
	})
	t.Run("unsupported", func(t *testing.T) {
		srv := h100(t) // IsSupportedDevice 0: no GPM call at all
		s, _ := Open(srv, nil)
		for range 2 {
			for _, g := range s.Sample(time.Now()) {
				if g.Have(sample.FieldGPM) {
					t.Error("GPM reported on an unsupported GPU")
				}
			}
		}
		if n := len(srv.GpmSampleAllocCalls()); n != 0 {
			t.Errorf("%d GPM allocations on unsupported GPUs", n)
		}
	})
}

func TestHungCallMeetsItsDeadline(t *testing.T) {
	old := CallTimeout
	CallTimeout = 200 * time.Millisecond
	defer func() { CallTimeout = old }()
	srv := h100(t)
	release := make(chan struct{})
	srv.Devices[5].(*server.Device).GetPowerUsageFunc = func() (uint32, gonvml.Return) {
		<-release
		return 300_000, gonvml.SUCCESS
	}
	s, _ := Open(srv, nil)
	start := time.Now()
	got := s.Sample(time.Now())
	if d := time.Since(start); d > time.Second {
		t.Errorf("Sample took %v with one hung call", d)
	}
	for i, g := range got {
		if i == 5 {
			if !errors.Is(g.Err, ErrTimeout) {
				t.Errorf("gpu 5: %v, want ErrTimeout", g.Err)
			}
			continue
		}
		if g.Err != nil || !g.Have(sample.FieldPower) {
			t.Errorf("gpu %d held up by gpu 5: %+v", i, g)
		}
	}
	// Still hung: reported at once, and not called again.
	start = time.Now()
	if g := s.Sample(time.Now())[5]; !errors.Is(g.Err, ErrTimeout) || time.Since(start) > time.Second {
		t.Errorf("second sample: %v after %v", g.Err, time.Since(start))
	}
	if n := len(srv.Devices[5].(*server.Device).GetPowerUsageCalls()); n != 1 {
		t.Errorf("hung call repeated %d times", n)
	}
	close(release)
	time.Sleep(50 * time.Millisecond)
	if g := s.Sample(time.Now())[5]; g.Err != nil || g.PowerW != 300 {
		t.Errorf("after the call returned: %+v", g)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

func TestMIG(t *testing.T) {
	srv := h100(t)
	parent := srv.Devices[0].(*server.Device)
	parent.GetMigModeFunc = func() (int, int, gonvml.Return) {
		return gonvml.DEVICE_MIG_ENABLE, gonvml.DEVICE_MIG_ENABLE, gonvml.SUCCESS
	}
	parent.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 3, gonvml.SUCCESS }
	parent.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i == 1 {
			return nil, gonvml.ERROR_NOT_FOUND // an empty slot
		}
		return &mock.Device{
			GetUUIDFunc:          func() (string, gonvml.Return) { return fmt.Sprintf("MIG-%d", i), gonvml.SUCCESS },
			GetGpuInstanceIdFunc: func() (int, gonvml.Return) { return i + 1, gonvml.SUCCESS },
			GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) {
				return gonvml.Memory{Total: 20 << 30, Used: uint64(i+1) << 30}, gonvml.SUCCESS
			},
		}, gonvml.SUCCESS
	}
	s, err := Open(srv, []string{"0", "1"})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Sample(time.Now())
	if len(got) != 4 {
		t.Fatalf("%d samples, want 2 GPUs and 2 MIG instances", len(got))
	}
	if got[0].Have(sample.FieldUtil) || got[0].Have(sample.FieldMemUtil) || len(got[0].UtilSamples) > 0 {
		t.Errorf("a MIG-enabled GPU reports a utilization: %+v", got[0])
	}
	if n := len(parent.GetUtilizationRatesCalls()) + len(parent.GetSamplesCalls()); n != 0 {
		t.Errorf("utilization asked %d times of a MIG-enabled GPU", n)
	}
	if !got[0].Have(sample.FieldPower) || !got[1].Have(sample.FieldUtil) {
		t.Error("power of the MIG GPU, or utilization of the other, missing")
	}
	for k, m := range got[2:] {
		want := []string{"MIG-0", "MIG-2"}[k]
		if m.UUID != want || m.Index != 0 || m.Instance != []string{"gi1", "gi3"}[k] || !m.Have(sample.FieldMemory) || m.Have(sample.FieldUtil) {
			t.Errorf("MIG sample %+v", m)
		}
	}
}

func TestProcesses(t *testing.T) {
	srv := h100(t)
	for i, d := range srv.Devices {
		d.(*server.Device).GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
			if i == 7 {
				return nil, gonvml.ERROR_NOT_SUPPORTED
			}
			return []gonvml.ProcessInfo{{Pid: uint32(1000 + i)}}, gonvml.SUCCESS
		}
	}
	s, _ := Open(srv, nil)
	got := s.Processes()
	uuid0, _ := srv.Devices[0].GetUUID()
	if len(got) != 7 || len(got[uuid0]) != 1 || got[uuid0][0] != 1000 {
		t.Errorf("processes %v", got)
	}
}
