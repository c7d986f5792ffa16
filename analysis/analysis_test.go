package analysis

import (
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

func closedAt(s int64, servers ...window.ServerWindow) window.Closed {
	start := time.Unix(s, 0)
	return window.Closed{Start: start, GPUs: []window.GPUWindow{{Start: start, Label: "0", Util: window.Some(50.0)}},
		Servers: servers}
}

// TestAnalyzeKeepsWindows: every window, GPU and server comes out in the
// joiner's order with its values, and the state is the facts' thresholds'
// verdict (the zero thresholds standing for the defaults).
func TestAnalyzeKeepsWindows(t *testing.T) {
	busy := window.ServerWindow{Server: "a", Tokens: window.Some[int64](100), ExactTokens: window.Some(100.0),
		Running: window.Some(2.0), Waiting: window.Some(0.0), GPUUtil: window.Some(50.0)}
	down := window.ServerWindow{Server: "b", Down: true}
	cs := []window.Closed{closedAt(0, busy, down), closedAt(10, busy)}
	for _, tc := range []struct {
		name  string
		facts Facts
		want  string // busy's state
	}{
		{"default thresholds", Facts{}, schema.StateOK},
		{"under_util raised to 60", Facts{Thresholds: Thresholds{KVBound: 0.9, QueueUtil: 60, UnderUtil: 60,
			SaturatedUtil: 90, Waiting: 0.5}}, schema.StateUnderutilized},
	} {
		got := Analyze(cs, &tc.facts)
		if len(got) != 2 || Count(got) != 5 {
			t.Fatalf("%s: %d windows, %d results, want 2 and 5", tc.name, len(got), Count(got))
		}
		for i, c := range got {
			if !c.Start.Equal(cs[i].Start) || len(c.GPUs) != 1 || c.GPUs[0].GPUWindow != cs[i].GPUs[0] {
				t.Errorf("%s: window %d: %+v, want the GPUs of %+v", tc.name, i, c, cs[i])
			}
			for k, s := range c.Servers {
				if s.Server != cs[i].Servers[k].Server || s.Tokens != cs[i].Servers[k].Tokens {
					t.Errorf("%s: window %d server %d is %+v, want %+v", tc.name, i, k, s.ServerWindow, cs[i].Servers[k])
				}
			}
		}
		if got[0].Servers[0].State != tc.want || got[0].Servers[1].State != schema.StateDown || got[1].Servers[0].State != tc.want {
			t.Errorf("%s: states %s, %s, %s; want %s, down, %s", tc.name, got[0].Servers[0].State,
				got[0].Servers[1].State, got[1].Servers[0].State, tc.want, tc.want)
		}
	}
}

// TestAppendReusesStorage: analysing batch after batch into one slice
// reuses its windows' storage and leaves nothing of the last batch.
func TestAppendReusesStorage(t *testing.T) {
	a := window.ServerWindow{Server: "a", Down: true}
	b := window.ServerWindow{Server: "b", Down: true}
	out := Append(nil, []window.Closed{closedAt(0, a, b)}, &Facts{})
	servers := &out[0].Servers[0]
	out = Append(out[:0], []window.Closed{closedAt(10, b)}, &Facts{})
	if len(out) != 1 || len(out[0].Servers) != 1 || out[0].Servers[0].Server != "b" || !out[0].Start.Equal(time.Unix(10, 0)) {
		t.Fatalf("second batch %+v", out)
	}
	if &out[0].Servers[0] != servers {
		t.Error("the second batch's servers were allocated anew")
	}
	if allocs := testing.AllocsPerRun(10, func() {
		out = Append(out[:0], []window.Closed{closedAt(10, b)}, &Facts{})
	}); allocs > 2 { // closedAt's own GPU slice, the argument slice
		t.Errorf("%v allocations per batch into reused storage", allocs)
	}
}
