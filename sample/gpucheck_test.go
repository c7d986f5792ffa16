package sample

import (
	"math"
	"testing"
)

func TestCheckDropsImpossibleReadings(t *testing.T) {
	good := func() GPU {
		return GPU{UtilPct: 50, MemUtilPct: 10, MemUsedBytes: 1 << 30, MemTotalBytes: 80 << 30, PowerW: 300,
			EnergyMJ: 1e9, TempC: 60, SMClockMHz: 1980, SMActive: 40, SMOccupancy: 30, TensorActive: 20, DRAMActive: 10,
			UtilSamples: []UtilSample{{Pct: 40}, {Pct: 60}},
			Has:         FieldUtil | FieldMemUtil | FieldMemory | FieldPower | FieldEnergy | FieldTemp | FieldSMClock | FieldGPM | FieldThrottle}
	}
	tests := []struct {
		name   string
		mangle func(*GPU)
		lost   Field
		want   Discard
	}{
		{"util over 100 %", func(s *GPU) { s.UtilPct = 500 }, FieldUtil, Discard{Series: "gpu_util", Reason: Huge}},
		{"util NaN", func(s *GPU) { s.UtilPct = math.NaN() }, FieldUtil, Discard{Series: "gpu_util", Reason: NotANumber}},
		{"negative memory util", func(s *GPU) { s.MemUtilPct = -5 }, FieldMemUtil, Discard{Series: "gpu_mem_util", Reason: Negative}},
		{"a GPM reading of +Inf", func(s *GPU) { s.TensorActive = math.Inf(1) }, FieldGPM, Discard{Series: "gpu_gpm", Reason: Infinite}},
		{"1e300 W", func(s *GPU) { s.PowerW = 1e300 }, FieldPower, Discard{Series: "gpu_power", Reason: Huge}},
		{"-1 W", func(s *GPU) { s.PowerW = -1 }, FieldPower, Discard{Series: "gpu_power", Reason: Negative}},
		{"-273 °C", func(s *GPU) { s.TempC = -273 }, FieldTemp, Discard{Series: "gpu_temp", Reason: OutOfRange}},
		{"1e6 MHz", func(s *GPU) { s.SMClockMHz = 1e6 }, FieldSMClock, Discard{Series: "gpu_sm_clock", Reason: Huge}},
		{"more memory used than there is", func(s *GPU) { s.MemUsedBytes = 81 << 30 }, FieldMemory, Discard{Series: "gpu_memory", Reason: Huge}},
		{"an exabyte of memory", func(s *GPU) { s.MemUsedBytes, s.MemTotalBytes = 1<<60, 1<<60 }, FieldMemory, Discard{Series: "gpu_memory", Reason: Huge}},
		{"negative energy", func(s *GPU) { s.EnergyMJ = -1 }, FieldEnergy, Discard{Series: "gpu_energy", Reason: Negative}},
		{"an absent field is not looked at", func(s *GPU) { s.PowerW, s.Has = math.NaN(), s.Has&^FieldPower }, FieldPower, Discard{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.mangle(&s)
			has := s.Has
			got := s.Check()
			if tc.want == (Discard{}) {
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
