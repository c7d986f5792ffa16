package gpu

import (
	"math"
	"testing"

	"github.com/tpsmon/tpsmon/collector"
)

func TestCheckDropsImpossibleReadings(t *testing.T) {
	good := func() Sample {
		return Sample{UtilPct: 50, MemUtilPct: 10, MemUsedBytes: 1 << 30, MemTotalBytes: 80 << 30, PowerW: 300,
			EnergyMJ: 1e9, TempC: 60, SMClockMHz: 1980, SMActive: 40, SMOccupancy: 30, TensorActive: 20, DRAMActive: 10,
			UtilSamples: []UtilSample{{Pct: 40}, {Pct: 60}},
			Has:         FieldUtil | FieldMemUtil | FieldMemory | FieldPower | FieldEnergy | FieldTemp | FieldSMClock | FieldGPM | FieldThrottle}
	}
	tests := []struct {
		name   string
		mangle func(*Sample)
		lost   Field
		want   collector.Discard
	}{
		{"util over 100 %", func(s *Sample) { s.UtilPct = 500 }, FieldUtil, collector.Discard{Series: "gpu_util", Reason: collector.Huge}},
		{"util NaN", func(s *Sample) { s.UtilPct = math.NaN() }, FieldUtil, collector.Discard{Series: "gpu_util", Reason: collector.NotANumber}},
		{"negative memory util", func(s *Sample) { s.MemUtilPct = -5 }, FieldMemUtil, collector.Discard{Series: "gpu_mem_util", Reason: collector.Negative}},
		{"a GPM reading of +Inf", func(s *Sample) { s.TensorActive = math.Inf(1) }, FieldGPM, collector.Discard{Series: "gpu_gpm", Reason: collector.Infinite}},
		{"1e300 W", func(s *Sample) { s.PowerW = 1e300 }, FieldPower, collector.Discard{Series: "gpu_power", Reason: collector.Huge}},
		{"-1 W", func(s *Sample) { s.PowerW = -1 }, FieldPower, collector.Discard{Series: "gpu_power", Reason: collector.Negative}},
		{"-273 °C", func(s *Sample) { s.TempC = -273 }, FieldTemp, collector.Discard{Series: "gpu_temp", Reason: collector.OutOfRange}},
		{"1e6 MHz", func(s *Sample) { s.SMClockMHz = 1e6 }, FieldSMClock, collector.Discard{Series: "gpu_sm_clock", Reason: collector.Huge}},
		{"more memory used than there is", func(s *Sample) { s.MemUsedBytes = 81 << 30 }, FieldMemory, collector.Discard{Series: "gpu_memory", Reason: collector.Huge}},
		{"an exabyte of memory", func(s *Sample) { s.MemUsedBytes, s.MemTotalBytes = 1<<60, 1<<60 }, FieldMemory, collector.Discard{Series: "gpu_memory", Reason: collector.Huge}},
		{"negative energy", func(s *Sample) { s.EnergyMJ = -1 }, FieldEnergy, collector.Discard{Series: "gpu_energy", Reason: collector.Negative}},
		{"an absent field is not looked at", func(s *Sample) { s.PowerW, s.Has = math.NaN(), s.Has&^FieldPower }, FieldPower, collector.Discard{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.mangle(&s)
			has := s.Has
			got := s.Check()
			if tc.want == (collector.Discard{}) {
				if len(got) != 0 || s.Has != has {
					t.Fatalf("discards %v, fields %b -> %b; want none dropped", got, has, s.Has)
				}
				return
			}
			if len(got) != 1 || got[0] != tc.want {
				t.Errorf("discards %v, want [%v]", got, tc.want)
			}
			if s.Has != has&^tc.lost {
				t.Errorf("fields %b -> %b, want only %b dropped", has, s.Has, tc.lost)
			}
		})
	}
	s := good()
	if d := s.Check(); len(d) != 0 || s.Has != good().Has {
		t.Errorf("a good sample lost %b: %v", good().Has&^s.Has, d)
	}
	s.UtilSamples = []UtilSample{{Pct: 40}, {Pct: 101}, {Pct: math.NaN()}, {Pct: 60}}
	d := s.Check()
	if len(d) != 2 || len(s.UtilSamples) != 2 || s.UtilSamples[0].Pct != 40 || s.UtilSamples[1].Pct != 60 {
		t.Errorf("driver samples %v after Check (discards %v), want 40 and 60 kept", s.UtilSamples, d)
	}
}
