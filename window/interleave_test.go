package window

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/sample"
)

// interleaving is k monotone series (replicas behind one URL) read in a
// random order: what each counted at every second, and which was read.
type interleaving struct {
	vals   [][]float64 // vals[i][s]: series i at second s
	picked []int       // which series the scrape of second s read
}

// maxInterleaveRun is the longest run of readings of one series: a series
// that stays away longer is gone (a replica taken out, a restart), and
// the one read instead is followed again after the Guard's quiet period.
const maxInterleaveRun = 12

// genInterleaving draws k >= 2 series with bases far apart (replicas with
// their own history: no restarted process could have counted them in a
// scrape) growing 50-150 tokens a second, read in a random order with
// runs of at most maxInterleaveRun, for steps seconds.
func genInterleaving(rng *rand.Rand, k, steps int) interleaving {
	var il interleaving
	base := 1e4 + rng.Float64()*1e5
	for range k {
		v := make([]float64, steps)
		cur := base
		for s := range steps {
			cur += 50 + rng.Float64()*100
			v[s] = cur
		}
		il.vals = append(il.vals, v)
		base += 1e5 + rng.Float64()*1e7
	}
	rng.Shuffle(k, func(a, b int) { il.vals[a], il.vals[b] = il.vals[b], il.vals[a] })
	bias := rng.Float64()
	run := 0
	for s := range steps {
		p := rng.IntN(k)
		if rng.Float64() < bias && s > 0 {
			p = il.picked[s-1] // sticky: long runs
		}
		if s > 0 && p == il.picked[s-1] {
			run++
			if run >= maxInterleaveRun {
				p = (p + 1 + rng.IntN(k-1)) % k
				run = 0
			}
		} else {
			run = 0
		}
		il.picked = append(il.picked, p)
	}
	return il
}

// growth is the most any one series grew over seconds [a, b].
func (il interleaving) growth(a, b int) float64 {
	a, b = max(a, 0), min(b, len(il.picked)-1)
	most := 0.0
	for _, v := range il.vals {
		most = max(most, v[b]-v[a])
	}
	return most
}

// checkInterleaving runs one interleaving through validation and the
// joiner: no window holds more than one series made around it, and all
// windows together no more than the series that grew most.
func checkInterleaving(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 28))
	k, steps := 2+rng.IntN(3), 120+rng.IntN(200)
	il := genInterleaving(rng, k, steps)
	const w = 2 * time.Second
	// The grace outlasts the Guard's memory, so a rewind reaches every
	// window it names (in the daemon it reaches the open windows).
	j := New(Config{Window: w, Grace: time.Minute, MaxGap: 2500 * time.Millisecond, Host: "h", Start: at(0)},
		[]Server{{Name: "llm", Engine: "vllm"}})
	var der collector.Deriver
	var got []ServerWindow
	for s := range steps {
		var smp sample.Server
		smp.Time = at(float64(s))
		smp.SetCounter(sample.GenerationTokens, il.vals[il.picked[s]][s])
		j.AddServer("llm", der.Derive(smp))
		got = append(got, servers(j.Flush(at(float64(s))))...)
	}
	got = append(got, servers(j.Close(at(float64(steps))))...)
	var sum int64
	for _, sw := range got {
		if !sw.Tokens.OK {
			continue
		}
		sum += sw.Tokens.V
		a := int(sw.Start.Sub(at(0)) / time.Second)
		// One second's slack each side: a window's edges interpolate
		// between the readings around them.
		if most := il.growth(a-1, a+int(w/time.Second)+1); float64(sw.Tokens.V) > most+1 {
			t.Fatalf("seed %d (k=%d): window at %d s holds %d tokens, no series made more than %.0f around it; read %v",
				seed, k, a, sw.Tokens.V, most, il.picked)
		}
	}
	if most := il.growth(0, steps-1); float64(sum) > most+1 {
		t.Fatalf("seed %d (k=%d): %d tokens in all, no series grew more than %.0f; read %v", seed, k, sum, most, il.picked)
	}
}

// TestInterleavedSeriesNeverAddUp is the property that a series no one
// process can have printed is never turned into tokens: random
// interleavings of k >= 2 monotone series yield at most what the series
// that grew most made. A few hundred cases here; set
// TPSMON_INTERLEAVE_FOR (a duration, e.g. 60s) to run for that long.
func TestInterleavedSeriesNeverAddUp(t *testing.T) {
	t.Parallel()
	var d time.Duration
	if v := os.Getenv("TPSMON_INTERLEAVE_FOR"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("TPSMON_INTERLEAVE_FOR: %v", err)
		}
	}
	start := time.Now()
	n := uint64(0)
	for ; n < 300 || time.Since(start) < d; n++ {
		checkInterleaving(t, n)
	}
	t.Logf("%d interleavings", n)
}

// TestRewindMakesAHole: a sample that rewinds makes the joiner forget what
// the counters said since, with the coverage it gave; the next reading
// starts the counter again, the growth across the span not counted.
func TestRewindMakesAHole(t *testing.T) {
	j := New(Config{Window: 2 * time.Second, Grace: 3 * time.Second, MaxGap: 2500 * time.Millisecond, Host: "h", Start: at(0)},
		[]Server{{Name: "llm", Engine: "vllm"}})
	var got []ServerWindow
	add := func(sec, v float64, rewind float64, counted bool) {
		var s sample.Server
		s.Time = at(sec)
		if rewind >= 0 {
			s.Rewind, s.Suspect = at(rewind), true
		}
		if counted {
			s.SetCounter(sample.GenerationTokens, v)
		} else {
			s.Discarded = 1
		}
		j.AddServer("llm", s)
		got = append(got, servers(j.Flush(at(sec)))...)
	}
	for i := 0; i <= 3; i++ {
		add(float64(i), 1000+100*float64(i), -1, true)
	}
	add(4, 50000, -1, true) // another series, taken for a burst
	add(5, 50100, -1, true)
	add(6, 0, 3, false) // found out: back to second 3
	for i := 7; i <= 12; i++ {
		add(float64(i), 0, -1, false)
	}
	for i := 13; i <= 20; i++ {
		add(float64(i), 9000+100*float64(i), -1, true)
	}
	got = append(got, servers(j.Close(at(21)))...)
	var tok []int64
	var cov []float64
	for _, w := range got {
		tok = append(tok, w.Tokens.V)
		cov = append(cov, w.Coverage)
	}
	want := []int64{200, 100, 0, 0, 0, 0, 100, 200, 200, 200, 0}
	wantCov := []float64{1, 0.5, 0, 0, 0, 0, 0.5, 1, 1, 1, 0}
	if len(tok) != len(want) {
		t.Fatalf("tokens %v, want %v", tok, want)
	}
	for i := range want {
		if tok[i] != want[i] || cov[i] != wantCov[i] {
			t.Fatalf("tokens %v coverage %v, want %v %v", tok, cov, want, wantCov)
		}
	}
}

// TestDerivedTokensBehindReplicas: an engine whose tokens are derived
// (llama.cpp's decode calls times busy slots) behind two replicas: what is
// derived from counters in doubt is forgotten too, no window holds more
// than one replica made.
func TestDerivedTokensBehindReplicas(t *testing.T) {
	j := New(Config{Window: 2 * time.Second, Grace: 10 * time.Second, MaxGap: 2500 * time.Millisecond, Host: "h", Start: at(0)},
		[]Server{{Name: "llm", Engine: "llamacpp"}})
	var der collector.Deriver
	var sum int64
	check := func(ws []ServerWindow) {
		for _, w := range ws {
			sum += w.Tokens.V
			if w.Tokens.V > 2*2*10*1.1 { // 2 s of 10 decodes/s, 2 slots each
				t.Errorf("window %v: %d tokens", w.Start.Sub(at(0)), w.Tokens.V)
			}
		}
	}
	for i := range 80 {
		dec := 5000 + 10*float64(i)
		if i >= 10 && i < 40 && i%3 != 0 {
			dec = 90000 + 10*float64(i) // the other replica
		}
		s := sample.Server{Time: at(float64(i))}
		s.SetCounter(sample.Decodes, dec)
		s.SetGauge(sample.SlotsPerDecode, 2)
		j.AddServer("llm", der.Derive(s))
		check(servers(j.Flush(at(float64(i)))))
	}
	check(servers(j.Close(at(80))))
	if sum > 2*10*80 {
		t.Errorf("%d tokens, one replica made %d", sum, 2*10*80)
	}
}
