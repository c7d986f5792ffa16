//go:build cgo

package nvml

import (
	"math"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// The dgxh100 mock with an H100 SXM's memory: 5120-bit HBM3 at 2619 MHz
// is 3.35 TB/s; a device whose driver does not say has no peak.
func TestFactsPeakBandwidth(t *testing.T) {
	srv := h100(t)
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		dev.GetMemoryBusWidthFunc = func() (uint32, gonvml.Return) { return 5120, gonvml.SUCCESS }
		dev.GetMaxClockInfoFunc = func(c gonvml.ClockType) (uint32, gonvml.Return) {
			if c != gonvml.CLOCK_MEM || i == 7 {
				return 0, gonvml.ERROR_NOT_SUPPORTED
			}
			return 2619, gonvml.SUCCESS
		}
	}
	s, err := Open(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	facts := s.Facts()
	if len(facts) != 8 {
		t.Fatalf("%d devices", len(facts))
	}
	for i, f := range facts {
		if f.Index != i || f.Name != "NVIDIA H100 80GB HBM3" || f.MemBusWidthBits != 5120 {
			t.Errorf("device %d: %+v", i, f)
		}
		bw := f.PeakBandwidthGBps()
		switch {
		case i == 7 && bw != 0:
			t.Errorf("device 7 without a memory clock: %g GB/s", bw)
		case i < 7 && math.Abs(bw-3352.32) > 0.01:
			t.Errorf("device %d: %g GB/s, want 3352.32", i, bw)
		}
	}
}
