// Package analysis is the stage between the joiner and the sinks: it takes
// closed windows (window.Closed), which hold time and counters only, and
// adds what follows from them, each value derived by a pure function of
// one window and the facts passed in (Facts), never read from a source.
// The state verdict (design §5) is the first such value.
//
// Adding a derived value: a field on ServerWindow (or GPUWindow) with a
// comment saying how exact it is, the function that computes it in a file
// of its own, its call in analyzeServer, and the facts it needs in Facts
// or ServerFacts. A fact that is missing leaves the field absent
// (window.Opt), never 0.
package analysis

import (
	"fmt"
	"time"

	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/window"
)

// Closed is one closed window as the sinks write it: the joiner's results
// with what the analysis derived from them, in the joiner's order (the
// GPUs by index, then the servers in configuration order).
type Closed struct {
	Start   time.Time
	GPUs    []GPUWindow
	Servers []ServerWindow
}

// GPUWindow is one GPU's window: a tpsmon_gpu point.
type GPUWindow struct {
	window.GPUWindow
	// Values derived from a GPU's window go here.
}

// ServerWindow is one server's window: a tpsmon_server point.
type ServerWindow struct {
	window.ServerWindow
	// State is the verdict of design §5, one of schema.States (State).
	State string
	// Latency is what one user felt (latency.Summarize): quantiles,
	// per-user speed, attainment of the server's objectives, goodput.
	Latency latency.Summary
	// SLOMiss names where the time went (queue, prefill, decode) when the
	// attainment is surely under the server's floor; empty otherwise.
	SLOMiss string
	// The prompt's tokens by where their KV came from and the prefix hit
	// rate (prompt.go); absent where the engine does not split them.
	PromptComputedTokens, PromptCachedTokens, PromptExternalTokens window.Opt[int64]
	PrefixHitRate                                                  window.Opt[float64]
	// Speculative decoding (spec.go): acceptance, tokens per verification
	// step, and SpecFinding (spec_ineffective, or empty); absent without
	// speculation.
	SpecAcceptRate, TokensPerStep window.Opt[float64]
	SpecFinding                   window.Opt[string]
	// StuckGPUs are the labels of the server's GPUs whose SM activity read
	// 0 at busy utilization while tokens flowed (activity_zero, per GPU;
	// sanity.go): not a field of the point, the log names them.
	StuckGPUs []string
	// Suspect names the sanity rules that fired (sanity.go), comma-joined;
	// absent when none did.
	Suspect window.Opt[string]
	// MBU and CeilingTPS are the window's model bandwidth utilization
	// and the system tokens/s its GPUs could give at its running requests
	// and KV occupancy (Ceiling; exact to the model's facts and the
	// datasheet peaks; without the KV occupancy CeilingTPS is an upper
	// bound and MBU a lower one). Absent without the facts.
	MBU, CeilingTPS window.Opt[float64]
	// Finding is what the MBU says of the window (Finding): near the
	// ceiling, demand-bound or host-bound; absent without an MBU.
	Finding window.Opt[string]
}

// Facts is what the analysis knows besides the windows, passed in by its
// caller: the daemon from its configuration, replay from its options.
type Facts struct {
	// Thresholds tune the state verdict; the zero value stands for
	// DefaultThresholds.
	Thresholds Thresholds
	// Servers holds what is known of each server, by name. A server
	// without an entry is analysed with what its windows say alone.
	Servers map[string]ServerFacts
	// GPUs are the node's GPUs' peaks by label (the gpu tag), from
	// NVML's names and memory clocks and the built-in table.
	GPUs map[string]roofline.Spec
	// SLO is the objective of servers without one of their own.
	SLO SLO
}

// SLO is a server's latency objective and the attainment under which a
// window is a finding.
type SLO struct {
	latency.Objective `mapstructure:",squash"`
	// Floor is the share of requests (0..1) that must meet the objective;
	// 0: no finding.
	Floor float64 `mapstructure:"floor"`
}

// Validate says what is wrong with an objective, by its key.
func (s SLO) Validate() error {
	if err := s.Objective.Validate(); err != nil {
		return err
	}
	if !(s.Floor >= 0 && s.Floor <= 1) {
		return fmt.Errorf("floor: %v is not a share in [0, 1]", s.Floor)
	}
	if s.Floor > 0 && !s.Set() {
		return fmt.Errorf("floor: %v without an objective (ttft, tpot or e2e)", s.Floor)
	}
	return nil
}

// ServerFacts is what is known of one server beyond its windows: its
// engine's and model's facts, its GPUs' specifications, its objectives.
type ServerFacts struct {
	// SLO is the server's objective; unset, the default (Facts.SLO).
	SLO *SLO
	// Roofline is what the decode ceiling needs (nil: not known). Its
	// GPU, when zero, is the window's GPUs' (Facts.GPUs) and its TP, when
	// 0, their number.
	Roofline *roofline.Server
}

// Analyze returns the analysis of cs.
func Analyze(cs []window.Closed, f *Facts) []Closed { return Append(nil, cs, f) }

// Append appends the analysis of cs to dst and returns the result. The
// storage of dst's entries beyond its length is reused, so a caller that
// analyses batch after batch into one slice (replay) allocates once.
func Append(dst []Closed, cs []window.Closed, f *Facts) []Closed {
	th := f.Thresholds
	if th == (Thresholds{}) {
		th = DefaultThresholds
	}
	for _, c := range cs {
		var a Closed
		if len(dst) < cap(dst) {
			a = dst[:len(dst)+1][len(dst)]
		}
		a.Start, a.GPUs, a.Servers = c.Start, a.GPUs[:0], a.Servers[:0]
		for _, g := range c.GPUs {
			a.GPUs = append(a.GPUs, GPUWindow{GPUWindow: g})
		}
		for _, s := range c.Servers {
			a.Servers = append(a.Servers, analyzeServer(s, th, f, c.GPUs))
		}
		dst = append(dst, a)
	}
	return dst
}

// analyzeServer derives what a server's window implies; gpus are the
// window's GPUs, the server's among them.
func analyzeServer(w window.ServerWindow, th Thresholds, f *Facts, gpus []window.GPUWindow) ServerWindow {
	a := ServerWindow{ServerWindow: w, State: State(w, th)}
	prompt(&a)
	spec(&a, th)
	if sf, ok := f.Servers[w.Server]; ok && sf.Roofline != nil {
		r := *sf.Roofline
		if a.TokensPerStep.OK && a.TokensPerStep.V >= 1 {
			r.TokensPerStep = a.TokensPerStep.V // the window's own speculation over the configured
		}
		a.MBU, a.CeilingTPS = Ceiling(w, r, f.GPUs)
		a.Finding = Finding(w, a.MBU, th)
	}
	a.StuckGPUs = stuckGPUs(&a.ServerWindow, gpus)
	sanity(&a, a.ceilingTPS())
	slo := f.sloOf(w.Server)
	a.Latency = latency.Summarize(w.Latency, slo.Objective, w.Coverage*w.Length.Seconds())
	if at := a.Latency.Attainment; at.OK && slo.Floor > 0 && at.Hi < slo.Floor {
		a.SLOMiss = a.Latency.MissPhase()
	}
	return a
}

// sloOf returns a server's objective.
func (f *Facts) sloOf(server string) SLO {
	if sf, ok := f.Servers[server]; ok && sf.SLO != nil {
		return *sf.SLO
	}
	return f.SLO
}

// ceilingTPS is the window's hardware ceiling in system tokens/s, for the
// above_ceiling rule: the decode ceiling's ceiling_tps, where the facts
// give one.
func (a *ServerWindow) ceilingTPS() window.Opt[float64] { return a.CeilingTPS }

// Count returns how many results cs hold.
func Count(cs []Closed) int {
	n := 0
	for _, c := range cs {
		n += len(c.GPUs) + len(c.Servers)
	}
	return n
}
