package window

import (
	"math"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/sample"
)

// step is one second of a generated counter: what the server really
// counted (truth, tokens since its start) and what the scrape read.
type step struct {
	truth   float64
	read    float64
	missing bool // no scrape at all
	corrupt bool // read is not truth
	restart bool // the server restarted before this reading
}

// corruptions a generated sequence can carry, one per op code.
const (
	opRestart = iota
	opNaN
	opInf
	opNegInf
	opNegative
	opHuge
	opMax
	opSpike
	opFlap
	opMissing
	numOps
)

// genSteps turns fuzz bytes into a counter sequence: two bytes a second,
// an op and an amount. The true counter grows by amount*40 tokens/s (up to
// 10,200) and restarts to amount tokens; corrupt readings are NaN, ±Inf,
// negative, 1e20, 1e308, a +1e12 spike or a flap back to an earlier
// reading. Corruptions are isolated: never twice in a row, never on the
// first reading nor next to a restart, where no reader can tell them
// from data: a restart is recognised by the reading after it, which must
// stay below the level before the restart, and the tokens made since the
// last valid reading before a restart are lost with the counter.
func genSteps(data []byte) []step {
	truth, level := 1000.0, 0.0
	var out []step
	var reads []float64 // valid readings since the last restart
	prevCorrupt := true // no corruption first
	for i := 0; i+1 < len(data) && len(out) < 600; i += 2 {
		op, amt := int(data[i])%(numOps+6), float64(data[i+1])
		s := step{}
		quiet := prevCorrupt || (len(out) > 0 && out[len(out)-1].restart)
		switch {
		case op == opRestart && truth > 512 && len(out) > 0 && !out[len(out)-1].corrupt && !out[len(out)-1].missing:
			// Only after a valid reading: what a server made between its
			// last valid reading and a restart is gone with the counter.
			level = truth
			truth = amt
			s.restart = true
			reads = nil
		case len(out) > 0 && out[len(out)-1].restart:
			// The reading that confirms a restart is still below the level
			// before it: one that is not reads as a dip, a flap.
			truth = min(truth+amt*40, level-1)
		default:
			truth += amt * 40
		}
		s.truth, s.read = truth, truth
		if !s.restart && !quiet {
			s.corrupt = true
			switch op {
			case opNaN:
				s.read = math.NaN()
			case opInf:
				s.read = math.Inf(1)
			case opNegInf:
				s.read = math.Inf(-1)
			case opNegative:
				s.read = -truth - 1
			case opHuge:
				s.read = 1e20
			case opMax:
				s.read = math.MaxFloat64
			case opSpike:
				s.read = truth + 1e12
			case opFlap:
				if len(reads) == 0 {
					s.corrupt = false
					break
				}
				s.read = reads[len(reads)-1-int(amt)%len(reads)]
				if s.read == truth {
					s.corrupt = false
				}
			case opMissing:
				s.missing, s.corrupt = true, false
			default:
				s.corrupt = false
			}
		}
		if !s.corrupt && !s.missing {
			reads = append(reads, s.read)
		}
		prevCorrupt = s.corrupt
		out = append(out, s)
	}
	// End on two valid readings, so that the last window's edge is known.
	for range 2 {
		truth += 100
		out = append(out, step{truth: truth, read: truth})
	}
	return out
}

// checkSequence runs a generated sequence through the Deriver (Guard) and
// the joiner and checks the properties of its windows.
func checkSequence(t *testing.T, data []byte) {
	t.Helper()
	steps := genSteps(data)
	const w = 2 * time.Second
	j := New(Config{Window: w, Grace: time.Second, MaxGap: 2500 * time.Millisecond, Host: "h", Start: at(0)},
		[]Server{{Name: "llm", Engine: "vllm"}})
	var der collector.Deriver
	trueTotal := 0.0
	// accepted[i]: the reading of second i reached the joiner.
	accepted := make([]bool, len(steps))
	reached := make([]bool, len(steps)) // some reading of second i reached the joiner
	cum := make([]float64, len(steps))  // true tokens made up to second i
	var pts []ServerWindow
	var starts []time.Time
	collect := func(now time.Time, closing bool) {
		cs := j.Flush(now)
		if closing {
			cs = j.Close(now)
		}
		for _, w := range servers(cs) {
			pts = append(pts, w)
			starts = append(starts, w.Start)
		}
	}
	for i, s := range steps {
		if i > 0 {
			if s.restart {
				trueTotal += s.truth
			} else {
				trueTotal += s.truth - steps[i-1].truth
			}
		}
		cum[i] = trueTotal
		ts := at(float64(i))
		if !s.missing {
			var smp sample.Server
			smp.Time = ts
			smp.SetCounter(sample.GenerationTokens, s.read)
			smp = der.Derive(smp)
			passed, v := smp.HasCounter[sample.GenerationTokens], smp.Counter[sample.GenerationTokens]
			// A valid reading passes unchanged; a corrupt one may pass
			// only as a stale value (a flap back to the last reading reads
			// as a second without tokens), never above the truth.
			if passed && (v > s.truth || !s.corrupt && v != s.truth) {
				t.Fatalf("second %d: passed %v on, the truth is %v (read %v)", i, v, s.truth, s.read)
			}
			accepted[i] = passed && !s.corrupt
			reached[i] = passed
			j.AddServer("llm", smp)
		}
		collect(ts, false)
	}
	collect(at(float64(len(steps)-1)), true)

	limit := sample.MaxTokensPerSecond * w.Seconds()
	var sum int64
	for k, f := range pts {
		tok, ok := f.Tokens.V, f.Tokens.OK
		if !ok {
			continue
		}
		if tok < 0 || float64(tok) > limit {
			t.Fatalf("window %d: tokens %d outside [0, %v]", k, tok, limit)
		}
		sum += tok
		// Where both edges were read validly, and within MaxGap of the
		// reading before (after a longer hole the tokens made in it land
		// in the window after it), the window holds exactly what the
		// server made in it.
		a := int(starts[k].Sub(at(0)) / time.Second)
		b := a + int(w/time.Second)
		edge := func(x int) bool { return x >= 2 && x < len(steps) && accepted[x] && (reached[x-1] || reached[x-2]) }
		if edge(a) && edge(b) {
			if want := cum[b] - cum[a]; float64(tok) != want {
				t.Fatalf("window %d [%d s, %d s): tokens %d, the server made %v", k, a, b, tok, want)
			}
		}
	}
	// The first reading is the baseline, not an increase.
	if want := trueTotal; float64(sum) != want {
		t.Fatalf("windows hold %d tokens, the server made %v", sum, want)
	}
}

// FuzzCounterSequence feeds random counter sequences (resets, flaps, NaN,
// ±Inf, negatives, huge values, spikes, missing scrapes) through
// validation and the joiner: tokens are never negative, never above the
// physical bound, and equal to the true increase, in total and in every
// window whose edges were read validly.
func FuzzCounterSequence(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{10, 50, 10, 50, 5, 0, 10, 50, 10, 50}) // 1e20 once
	f.Add([]byte{10, 50, 10, 50, 8, 1, 10, 50, 8, 1, 10, 50, 8, 2, 10, 50})
	f.Add([]byte{10, 200, 0, 3, 10, 200, 1, 0, 10, 9, 4, 0, 10, 9, 6, 0, 10, 0, 7, 0, 10, 1})
	f.Add([]byte{9, 0, 9, 0, 9, 0, 9, 0, 10, 100, 10, 100, 0, 1, 10, 1, 8, 3, 10, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSequence(t, data)
	})
}

// TestGuardedWindows is the attacks, one sequence each, on a
// counter at 100 tokens/s: the windows read what the valid samples say.
func TestGuardedWindows(t *testing.T) {
	const rate = 100.0
	tests := []struct {
		name string
		bad  func(truth float64) float64 // the reading of second 5
	}{
		{"1e20 for one scrape", func(float64) float64 { return 1e20 }},
		{"1e308", func(float64) float64 { return 1e308 }},
		{"negative", func(float64) float64 { return -5 }},
		{"NaN", func(float64) float64 { return math.NaN() }},
		{"+Inf", func(float64) float64 { return math.Inf(1) }},
		{"spike", func(v float64) float64 { return v + 1e12 }},
		{"flap back", func(v float64) float64 { return v - 3*rate }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := New(Config{Window: 2 * time.Second, Grace: time.Second, MaxGap: 2500 * time.Millisecond,
				Host: "h", Start: at(0)}, []Server{{Name: "llm", Engine: "vllm"}})
			var der collector.Deriver
			var got []ServerWindow
			discards := 0
			for i := 0; i <= 12; i++ {
				v := 5000 + rate*float64(i)
				if i == 5 {
					v = tc.bad(v)
				}
				var s sample.Server
				s.Time = at(float64(i))
				s.SetCounter(sample.GenerationTokens, v)
				s = der.Derive(s)
				discards += len(s.Discards)
				j.AddServer("llm", s)
				got = append(got, servers(j.Flush(at(float64(i))))...)
			}
			if discards != 1 {
				t.Errorf("%d values discarded, want 1", discards)
			}
			if len(got) < 4 {
				t.Fatalf("%d windows closed", len(got))
			}
			for k, f := range got {
				if f.Tokens != Some(int64(2*rate)) {
					t.Errorf("window %d: tokens %v, want %v", k, f.Tokens, 2*rate)
				}
			}
			// One sample missing is bridged: the gap stays within MaxGap,
			// the counter is interpolated across it.
			for k, f := range got {
				if c := f.Coverage; c != 1 {
					t.Errorf("window %d: coverage %v, want 1", k, c)
				}
			}
		})
	}
}

// TestBadStretchLowersCoverage: three bad samples in a row leave a hole
// longer than MaxGap: the windows around it say they saw less, and the
// tokens made meanwhile land after the hole, none lost.
func TestBadStretchLowersCoverage(t *testing.T) {
	j := New(Config{Window: 2 * time.Second, Grace: time.Second, MaxGap: 2500 * time.Millisecond,
		Host: "h", Start: at(0)}, []Server{{Name: "llm", Engine: "vllm"}})
	var der collector.Deriver
	var got []ServerWindow
	for i := 0; i <= 12; i++ {
		v := 5000 + 100*float64(i)
		if i >= 4 && i <= 6 {
			v = math.NaN()
		}
		var s sample.Server
		s.Time = at(float64(i))
		s.SetCounter(sample.GenerationTokens, v)
		j.AddServer("llm", der.Derive(s))
		got = append(got, servers(j.Flush(at(float64(i))))...)
	}
	var total int64
	for k, f := range got {
		c := f.Coverage
		if hole := k >= 1 && k <= 3; hole != (c < 1) {
			t.Errorf("window %d: coverage %v", k, c)
		}
		if f.Tokens.OK {
			total += f.Tokens.V
		}
	}
	if want := int64(100 * 2 * len(got)); total != want {
		t.Errorf("tokens %d in %d windows, want %d", total, len(got), want)
	}
}

// TestRestartStillCounts: a decrease to a small value, confirmed by the
// next reading, is a restart whose new count is all tokens.
func TestRestartStillCounts(t *testing.T) {
	var der collector.Deriver
	reads := []float64{5000, 5100, 5200, 30, 130, 230}
	var passed []float64
	for i, v := range reads {
		var s sample.Server
		s.Time = at(float64(i))
		s.SetCounter(sample.GenerationTokens, v)
		s = der.Derive(s)
		if len(s.Discards) != 0 {
			t.Fatalf("second %d: discarded %v", i, s.Discards)
		}
		if s.HasCounter[sample.GenerationTokens] {
			passed = append(passed, s.Counter[sample.GenerationTokens])
		}
	}
	want := []float64{5000, 5100, 5200, 130, 230} // 30 is held until 130 confirms it
	if len(passed) != len(want) {
		t.Fatalf("passed %v, want %v", passed, want)
	}
	for i := range want {
		if passed[i] != want[i] {
			t.Fatalf("passed %v, want %v", passed, want)
		}
	}
}

// TestFlapDoesNotInflate: a counter alternating between two readings (two
// replicas behind one address) counts the growth once.
func TestFlapDoesNotInflate(t *testing.T) {
	j := New(Config{Window: 2 * time.Second, Grace: time.Second, MaxGap: 2500 * time.Millisecond,
		Host: "h", Start: at(0)}, []Server{{Name: "llm", Engine: "vllm"}})
	var der collector.Deriver
	flaps := 0
	var total int64
	for i := 0; i <= 20; i++ {
		v := 1000 + 100*float64(i)
		if i%2 == 1 {
			v = 1000 // the stale replica
		}
		var s sample.Server
		s.Time = at(float64(i))
		s.SetCounter(sample.GenerationTokens, v)
		s = der.Derive(s)
		for _, d := range s.Discards {
			if d.Reason == sample.Flap {
				flaps++
			}
		}
		j.AddServer("llm", s)
		for _, w := range servers(j.Flush(at(float64(i)))) {
			total += w.Tokens.V
		}
	}
	for _, w := range servers(j.Close(at(20))) {
		total += w.Tokens.V
	}
	if total != 2000 {
		t.Errorf("tokens %d over 20 s, the server made 2000", total)
	}
	if flaps != 9 {
		t.Errorf("%d flaps counted, want 9", flaps)
	}
}

// TestWindowsAlignedToTheEpoch: windows start at multiples of their length
// on Unix time, for lengths that divide a day and those that do not.
func TestWindowsAlignedToTheEpoch(t *testing.T) {
	now := time.Unix(1_700_000_003, 500_000_000)
	for _, w := range []time.Duration{time.Second, 7 * time.Second, 10 * time.Second, 90 * time.Second, 7 * time.Minute, time.Hour} {
		s := Start(now, w)
		if s.UnixNano()%int64(w) != 0 || s.After(now) || !now.Before(s.Add(w)) {
			t.Errorf("window %v: starts at %v for %v", w, s, now)
		}
		j := New(Config{Window: w, Grace: 0, MaxGap: w, Host: "h", Start: now}, nil)
		if cs := j.Close(now.Add(2 * w)); len(cs) != 0 {
			t.Fatalf("%d windows without servers", len(cs))
		}
		if j.next.UnixNano()%int64(w) != 0 {
			t.Errorf("window %v: the joiner's windows start at %v", w, j.next)
		}
	}
	if s := Start(time.Unix(-5, 0), 7*time.Second); s.Unix() != -7 {
		t.Errorf("before the epoch: %v", s.Unix())
	}
}
