package window

import (
	"math"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
)

// TestShortWindowRates runs the demo's setup at the joiner: a server
// scraped every 0.5 s with jitter at a constant true rate, a GPU sampled
// alongside at constant power, 1 s windows flushed as a daemon does (every
// 100 ms, samples handed over when they arrive). Every closed window's
// rates must be the true ones, whatever the phase of the scrapes against
// the edges, and the integer counts must add up to the counters' increase.
func TestShortWindowRates(t *testing.T) {
	const (
		rate   = 2160.0 // tokens/s: 48 streams at 45 tok/s
		prompt = 6480.0
		watts  = 5000.0
	)
	tests := []struct {
		name   string
		grace  time.Duration
		lag    float64 // seconds from a sample's time to its arrival
		jitter []float64
		drop   map[int]bool // scrapes that never arrive
	}{
		{name: "grace covers the lag", grace: time.Second, lag: 0.1, jitter: []float64{0, 0.03, -0.02, 0.04}},
		// The windows close before the scrape after their edge arrives:
		// the edge is held at the last point and the rest spills over.
		{name: "windows close ahead of the edge's scrape", grace: 200 * time.Millisecond, lag: 0.45, jitter: []float64{0.356, 0.406, 0.38}},
		{name: "phase on the edge", grace: 0, lag: 0.05, jitter: []float64{0, 0.001, -0.001}},
		// A hole longer than MaxGap: its increase lands after it.
		{name: "gaps longer than MaxGap", grace: time.Second, lag: 0.1, jitter: []float64{0.1, 0.12, 0.08},
			drop: map[int]bool{7: true, 8: true, 9: true, 20: true, 21: true, 22: true, 23: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := New(Config{Window: time.Second, Grace: tt.grace, MaxGap: 1250 * time.Millisecond, Host: "h", Start: at(0)},
				[]Server{{Name: "llm", Engine: "vllm", GPUs: []string{"0"}}})
			type arrival struct {
				at  float64
				add func()
			}
			var arr []arrival
			for i := 0; i < 40; i++ {
				ts := 0.5*float64(i) + tt.jitter[i%len(tt.jitter)]
				if ts < 0 || tt.drop[i] {
					continue
				}
				var smp sample.Server
				smp.Time = at(ts)
				smp.SetCounter(sample.GenerationTokens, rate*ts)
				smp.SetCounter(sample.PromptTokens, prompt*ts)
				smp.SetGauge(sample.Running, 48)
				g := gpuSample(ts, 90, watts, int64(watts*ts*1000))
				arr = append(arr, arrival{ts + tt.lag, func() { j.AddServer("llm", smp); j.AddGPU(g) }})
			}
			var got []ServerWindow
			next := 0
			for now := 0.0; now <= 21; now += 0.1 {
				for next < len(arr) && arr[next].at <= now {
					arr[next].add()
					next++
				}
				got = append(got, servers(j.Flush(at(now)))...)
			}
			if len(got) < 15 {
				t.Fatalf("%d windows closed, want at least 15", len(got))
			}
			var total int64
			for k, f := range got {
				if f.Tokens.OK {
					total += f.Tokens.V
				}
				if k == 0 || f.Down {
					continue // the first point starts mid-window
				}
				for _, c := range []struct {
					name string
					v    Opt[float64]
					want float64
				}{{schema.FieldSystemTPS, f.SystemTPS, rate}, {schema.FieldPromptTPS, f.PromptTPS, prompt}, {schema.FieldTokensPerJoule, f.TokensPerJoule, rate / watts}} {
					if !c.v.OK {
						if f.Coverage > 0 {
							t.Errorf("window %d: no %s (coverage %v)", k, c.name, f.Coverage)
						}
						continue
					}
					if math.Abs(c.v.V-c.want) > 1e-6*c.want {
						t.Errorf("window %d: %s %.2f, want %.2f (tokens %v, coverage %v)", k, c.name, c.v.V, c.want, f.Tokens, f.Coverage)
					}
				}
			}
			// The integer counts add up to the counter's increase from its
			// first point to the last closed edge.
			c := j.byName["llm"].counters[sample.GenerationTokens]
			if want := int64(math.Round(c.edge)) - int64(math.Round(tt.jitter[0]*rate)); total != want || want <= 0 {
				t.Errorf("tokens add up to %d, counter increased by %d", total, want)
			}
		})
	}
}

// TestTimelinePrune: a pruned timeline keeps the deliveries from the last
// one at or before e on, in order, whether what is left moves to the front
// of the array (a little of it) or the slice is cut (much of it), and
// appends after it land in order.
func TestTimelinePrune(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name       string
		n, pruneAt int
		wantFirst  int
	}{
		{"nothing before", 10, -5, 0},
		{"only the first before", 10, 0, 0},
		{"little left", 100, 90, 90},
		{"much left", 1000, 5, 5},
		{"between two", 100, 50, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl timeline
			for s := range tc.n {
				tl.add(at(s))
			}
			tl.prune(at(tc.pruneAt).Add(500 * time.Millisecond))
			tl.add(at(tc.n))
			if len(tl.ts) != tc.n+1-tc.wantFirst {
				t.Fatalf("%d deliveries left, want %d", len(tl.ts), tc.n+1-tc.wantFirst)
			}
			for i, ts := range tl.ts {
				if !ts.Equal(at(tc.wantFirst + i)) {
					t.Fatalf("delivery %d at %v, want %v", i, ts, at(tc.wantFirst+i))
				}
			}
		})
	}
}
