package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// An excerpt of the wild corpus (testdata/wild) is a log (NAME.log) or a
// folder of metrics pages (NAME/, <unix-ms>.prom files) that a user pasted
// in a public issue, PR, doc or discussion, as pasted, beside a sidecar
// (NAME.json) that names its source and the truth the excerpt itself
// states. TestWildCorpus replays each as `tpsmon replay` would and holds
// the windows to that truth.
type wildExcerpt struct {
	Source string `json:"source"` // where it was pasted: the or PR's address
	Date   string `json:"date"`   // when, YYYY-MM
	Engine string `json:"engine"` // the engine tag every server window must carry
	// Version is the engine version the source names, where it does.
	Version string `json:"version,omitempty"`
	// Year is that of stamps that carry none; StartedAt, for llama.cpp's
	// --log-timestamps, when the server started (RFC 3339).
	Year      int    `json:"year,omitempty"`
	StartedAt string `json:"started_at,omitempty"`
	WindowS   int    `json:"window_s,omitempty"` // default 10
	// States is the truth in the excerpt's own words (what its lines
	// print); Trusts says which of its numbers tpsmon trusts where they
	// disagree, and why.
	States string   `json:"states"`
	Trusts string   `json:"trusts,omitempty"`
	Want   wildWant `json:"want"`
}

// wildWant is what the windows must show; a check left out is not made.
type wildWant struct {
	Tokens       *wildValue `json:"tokens,omitempty"`        // output tokens, summed over the windows
	PromptTokens *wildValue `json:"prompt_tokens,omitempty"` // prompt tokens, summed
	// Rate is the output tokens over the seconds the windows observed:
	// the system rate over the whole excerpt.
	Rate *wildValue `json:"rate,omitempty"`
	// The ranges hold every window that has the field.
	SystemTPS  *wildRange `json:"system_tps,omitempty"`
	PerUserTPS *wildRange `json:"per_user_tps,omitempty"`
	Running    *wildRange `json:"running,omitempty"`
	Waiting    *wildRange `json:"waiting,omitempty"`
	KV         *wildRange `json:"kv,omitempty"`
	// Why requests wait and whether the engine is awake (vLLM
	// num_requests_waiting_by_reason, engine_sleep_state): the windows'
	// means of the engine's gauges.
	WaitingCapacity *wildRange `json:"waiting_capacity,omitempty"`
	WaitingDeferred *wildRange `json:"waiting_deferred,omitempty"`
	Awake           *wildRange `json:"awake,omitempty"`
	// NotStates are verdicts no window may have (sleeping on an engine
	// the page says is awake, kv_bound where the memory is free).
	NotStates []string `json:"not_states,omitempty"`
	// Has names fields that some window must carry (per_user_tps,
	// prompt_tokens, ...), for excerpts whose values are not stated.
	Has []string `json:"has,omitempty"`
}

// wildValue is a stated value and the relative error allowed (0: exact).
type wildValue struct {
	Value float64 `json:"value"`
	Tol   float64 `json:"tol"`
}

func (v *wildValue) holds(got float64) bool {
	return math.Abs(got-v.Value) <= v.Tol*math.Abs(v.Value)+1e-9
}

// wildRange bounds a field in every window that has it.
type wildRange struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func (r *wildRange) check(t *testing.T, name string, ws []analysis.ServerWindow, get func(analysis.ServerWindow) window.Opt[float64]) {
	t.Helper()
	seen := 0
	for _, w := range ws {
		v := get(w)
		if !v.OK {
			continue
		}
		seen++
		// Stated values are printed decimals; the windows' sums of them
		// are floats.
		if eps := 1e-9 * math.Max(1, math.Max(math.Abs(r.Min), math.Abs(r.Max))); v.V < r.Min-eps || v.V > r.Max+eps {
			t.Errorf("window %s: %s %v outside the stated [%v, %v]", w.Start.Format(time.TimeOnly), name, v.V, r.Min, r.Max)
		}
	}
	if seen == 0 {
		t.Errorf("no window has %s", name)
	}
}

func TestWildCorpus(t *testing.T) {
	sidecars, err := filepath.Glob("testdata/wild/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(sidecars) == 0 {
		t.Fatal("no excerpts in testdata/wild")
	}
	for _, sc := range sidecars {
		name := strings.TrimSuffix(filepath.Base(sc), ".json")
		t.Run(name, func(t *testing.T) {
			var ex wildExcerpt
			b, err := os.ReadFile(sc)
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&ex); err != nil {
				t.Fatalf("sidecar: %v", err)
			}
			if ex.Source == "" || ex.Date == "" || ex.Engine == "" || ex.States == "" {
				t.Fatal("sidecar: source, date, engine and states are required")
			}
			ws := replayWild(t, name, ex)
			checkWild(t, ex.Want, ex.Engine, ws)
		})
	}
}

// replayWild replays the excerpt name as `tpsmon replay --engine auto`.
func replayWild(t *testing.T, name string, ex wildExcerpt) []analysis.ServerWindow {
	t.Helper()
	o := Options{Engine: "auto", Year: ex.Year, Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC"}
	if ex.WindowS > 0 {
		o.Window = time.Duration(ex.WindowS) * time.Second
	}
	if ex.StartedAt != "" {
		at, err := time.Parse(time.RFC3339, ex.StartedAt)
		if err != nil {
			t.Fatalf("sidecar: started_at: %v", err)
		}
		o.StartedAt = at
	}
	base := filepath.Join("testdata", "wild", name)
	if fi, err := os.Stat(base); err == nil && fi.IsDir() {
		o.MetricsDir = base
	} else {
		o.LogFile = base + ".log"
	}
	var out closed
	var warn bytes.Buffer
	if err := Run(context.Background(), o, &out, &warn); err != nil {
		t.Fatalf("replay: %v (warnings: %s)", err, warn.String())
	}
	var ws []analysis.ServerWindow
	for _, c := range out {
		ws = append(ws, c.Servers...)
	}
	if len(ws) == 0 {
		t.Fatalf("no server windows (warnings: %s)", warn.String())
	}
	return ws
}

func checkWild(t *testing.T, want wildWant, engine string, ws []analysis.ServerWindow) {
	t.Helper()
	var tokens, prompt int64
	var observed float64
	has := map[string]bool{}
	for _, w := range ws {
		if w.Engine != engine {
			t.Errorf("window %s: engine %q, want %q", w.Start.Format(time.TimeOnly), w.Engine, engine)
		}
		if w.Tokens.OK {
			tokens += w.Tokens.V
			observed += w.Length.Seconds() * w.Coverage
		}
		if w.PromptTokens.OK {
			prompt += w.PromptTokens.V
		}
		for f, ok := range map[string]bool{
			"tokens": w.Tokens.OK, "prompt_tokens": w.PromptTokens.OK, "system_tps": w.SystemTPS.OK,
			"per_user_tps": w.PerUserTPS.OK, "running": w.Running.OK, "waiting": w.Waiting.OK, "kv": w.KVCacheUsage.OK,
		} {
			has[f] = has[f] || ok
		}
	}
	for _, w := range ws {
		if slices.Contains(want.NotStates, w.State) {
			t.Errorf("window %s: state %s, which the excerpt rules out", w.Start.Format(time.TimeOnly), w.State)
		}
	}
	for _, f := range want.Has {
		if !has[f] {
			t.Errorf("no window has %s", f)
		}
	}
	if want.Tokens != nil && !want.Tokens.holds(float64(tokens)) {
		t.Errorf("tokens %d, the excerpt states %v (±%v)", tokens, want.Tokens.Value, want.Tokens.Tol)
	}
	if want.PromptTokens != nil && !want.PromptTokens.holds(float64(prompt)) {
		t.Errorf("prompt tokens %d, the excerpt states %v (±%v)", prompt, want.PromptTokens.Value, want.PromptTokens.Tol)
	}
	if want.Rate != nil {
		if observed == 0 || !want.Rate.holds(float64(tokens)/observed) {
			t.Errorf("rate %.2f tok/s (%d tokens over %.1f s observed), the excerpt states %v (±%v)",
				float64(tokens)/observed, tokens, observed, want.Rate.Value, want.Rate.Tol)
		}
	}
	for _, r := range []struct {
		name string
		want *wildRange
		get  func(analysis.ServerWindow) window.Opt[float64]
	}{
		{"system_tps", want.SystemTPS, func(w analysis.ServerWindow) window.Opt[float64] { return w.SystemTPS }},
		{"per_user_tps", want.PerUserTPS, func(w analysis.ServerWindow) window.Opt[float64] { return w.PerUserTPS }},
		{"running", want.Running, func(w analysis.ServerWindow) window.Opt[float64] { return w.Running }},
		{"waiting", want.Waiting, func(w analysis.ServerWindow) window.Opt[float64] { return w.Waiting }},
		{"kv", want.KV, func(w analysis.ServerWindow) window.Opt[float64] { return w.KVCacheUsage }},
		{"waiting_capacity", want.WaitingCapacity, func(w analysis.ServerWindow) window.Opt[float64] { return w.Gauges[sample.WaitingCapacity] }},
		{"waiting_deferred", want.WaitingDeferred, func(w analysis.ServerWindow) window.Opt[float64] { return w.Gauges[sample.WaitingDeferred] }},
		{"awake", want.Awake, func(w analysis.ServerWindow) window.Opt[float64] { return w.Gauges[sample.Awake] }},
	} {
		if r.want != nil {
			r.want.check(t, r.name, ws, r.get)
		}
	}
}
