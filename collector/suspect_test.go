package collector

import (
	"math"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// guardRun feeds generation counter readings, one a second from t=1000 s,
// through a Deriver and returns the samples.
func guardRun(reads []float64) []sample.Server {
	var der Deriver
	out := make([]sample.Server, 0, len(reads))
	for i, v := range reads {
		s := sample.Server{Time: time.Unix(int64(1000+i), 0)}
		s.SetCounter(sample.GenerationTokens, v)
		out = append(out, der.Derive(s))
	}
	return out
}

// ramp is n readings from v growing by step.
func ramp(v, step float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v + step*float64(i)
	}
	return out
}

// alternate is n readings taking turns between a and b, each growing by
// step a reading.
func alternate(a, b, step float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		base := a
		if i%2 == 1 {
			base = b
		}
		out[i] = base + step*float64(i)
	}
	return out
}

func cat(parts ...[]float64) []float64 {
	var out []float64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestSuspectCounters: what one process's counter does (restarts, bursts,
// a stale page) is followed; what only several can do (two replicas in
// turn, a page flapping up, a fall to more than a restarted process can
// have counted) turns the server suspect, with a rewind to before the
// first reading in doubt, until the counter has grown as one for
// quietReadings readings.
func TestSuspectCounters(t *testing.T) {
	tests := []struct {
		name    string
		reads   []float64
		suspect bool
		// rewindBy: the first rewind reaches back at least to this reading.
		rewindBy int
		// trusted: the index of the reading from which the counter is
		// followed again: quietReadings after the last fall or step.
		trusted int
	}{
		{"restart", cat(ramp(5000, 100, 5), ramp(30, 100, 5)), false, 0, 0},
		{"restart after silence", cat(ramp(5e6, 1e4, 5), ramp(2e4, 1e4, 5)), false, 0, 0},
		{"burst", cat(ramp(1000, 10, 5), ramp(50000, 1e5, 5), ramp(550000, 10, 5)), false, 0, 0},
		{"stale page", cat(ramp(5000, 100, 5), []float64{5100}, ramp(5600, 100, 5)), false, 0, 0},
		{"frozen stale replica", alternate(1000, 1000, 0, 1), false, 0, 0},
		{"two replicas", cat(ramp(5000, 50, 4), alternate(20200, 5200, 50, 20), ramp(6200, 100, 20)), true, 0, 23 + quietReadings},
		{"up-flap", cat(ramp(1000, 100, 4), alternate(4400, 1400, 100, 20), ramp(3400, 100, 20)), true, 0, 23 + quietReadings},
		{"fall to another series", cat(ramp(50000, 100, 4), ramp(30000, 100, 4), ramp(50400, 100, 30)), true, 0, 8 + quietReadings},
		{"replica below every reading", cat(ramp(80000, 100, 4), ramp(20000, 100, 30)), true, 0, 4 + 1 + quietReadings},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := guardRun(tc.reads)
			suspect, rewound, trusted := false, -1, -1
			for i, s := range out {
				if s.Suspect {
					suspect = true
				}
				if !s.Rewind.IsZero() && rewound < 0 {
					rewound = int(s.Rewind.Unix() - 1000)
				}
				if suspect && !s.Suspect && trusted < 0 {
					trusted = i
				}
				for _, d := range s.Discards {
					if !tc.suspect && d.Reason == sample.Suspect {
						t.Errorf("reading %d: %v", i, d)
					}
				}
			}
			if suspect != tc.suspect {
				t.Fatalf("suspect %v, want %v", suspect, tc.suspect)
			}
			if !tc.suspect {
				return
			}
			if rewound < 0 || rewound > tc.rewindBy {
				t.Errorf("rewound to reading %d, want %d or before", rewound, tc.rewindBy)
			}
			if trusted != tc.trusted {
				t.Errorf("trusted again from reading %d, want %d", trusted, tc.trusted)
			}
			if trusted >= 0 && (!out[trusted].HasCounter[sample.GenerationTokens] || out[trusted].Counter[sample.GenerationTokens] != tc.reads[trusted]) {
				t.Errorf("reading %d passed %v, want %v", trusted, out[trusted].Counter[sample.GenerationTokens], tc.reads[trusted])
			}
		})
	}
}

// TestRestartCountsFromNewValue: a restart is not suspect and counts from
// the new value on, and the run after it too.
func TestRestartCountsFromNewValue(t *testing.T) {
	out := guardRun(cat(ramp(5000, 100, 3), ramp(30, 100, 3), ramp(330, 100, 30)))
	for i, s := range out {
		if s.Suspect || len(s.Discards) > 0 {
			t.Fatalf("reading %d: suspect %v, discards %v", i, s.Suspect, s.Discards)
		}
		if i != 3 && !s.HasCounter[sample.GenerationTokens] {
			t.Fatalf("reading %d held", i)
		}
	}
}

// TestBadGaugeCostsItself: a NaN or absurd gauge goes alone, with its
// reason; the counter beside it still counts and the sample is still
// coverage (Discarded 0).
func TestBadGaugeCostsItself(t *testing.T) {
	for _, tc := range []struct {
		g      sample.Gauge
		v      float64
		reason sample.Reason
	}{
		{sample.Waiting, math.NaN(), sample.NotANumber},
		{sample.Waiting, 1e30, sample.Huge},
		{sample.KVUsage, math.NaN(), sample.NotANumber},
		{sample.KVUsage, math.Inf(1), sample.Infinite},
		{sample.Running, -1, sample.Negative},
	} {
		var der Deriver
		for i, v := range []float64{1000, 1100} {
			s := sample.Server{Time: time.Unix(int64(1000+i), 0)}
			s.SetCounter(sample.GenerationTokens, v)
			s.SetGauge(tc.g, tc.v)
			s = der.Derive(s)
			if !s.HasCounter[sample.GenerationTokens] || s.Counter[sample.GenerationTokens] != v || s.Discarded != 0 {
				t.Errorf("%v %v: counter %v %v, Discarded %d", tc.g, tc.v, s.HasCounter[sample.GenerationTokens], s.Counter[sample.GenerationTokens], s.Discarded)
			}
			if s.HasGauge[tc.g] || len(s.Discards) != 1 || s.Discards[0] != (sample.Discard{Series: tc.g.String(), Reason: tc.reason}) {
				t.Errorf("%v %v: gauge kept %v, discards %v", tc.g, tc.v, s.HasGauge[tc.g], s.Discards)
			}
		}
	}
}
