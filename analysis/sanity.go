package analysis

import (
	"strings"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// The sanity layer: checks that a window's numbers, each plausible alone,
// cannot all be true together; one of the sensors or counters behind them
// lies. A rule that fires names itself in the window's suspect field; the
// values are written as read all the same (they may be true), never
// dropped or smoothed. Each rule is a pure function of one window.

// Sanity rules, as the suspect field and tpsmon_suspect_windows_total name them.
const (
	// RuleActivityZero: SM activity (NVML GPM, DCGM DCP) reads 0 while
	// utilization is near 100 % and tokens flow: the profiling metric is
	// stuck (dcgm-exporter #662), not the GPU idle.
	RuleActivityZero = "activity_zero"
	// RuleGPUIdle: tokens flow on a server whose mapped GPUs all read 0 %
	// utilization: the server runs on other GPUs than the ones attributed
	// to it (gpus, CUDA_VISIBLE_DEVICES vs NVML order).
	RuleGPUIdle = "gpu_idle"
	// RuleCounterAsRate: the collector's Guard refused the server's
	// counters in the window as no one process's: they fell and rose
	// again, or stepped, as a rate exposed with a counter's type does (or
	// two processes behind one address). The window-level sign is the
	// Guard's verdict (window.ServerWindow.CountersDoubted); the counters
	// themselves are already withheld by it, their windows' tokens absent.
	RuleCounterAsRate = "counter_as_rate"
	// RuleCompletionDrift: an engine's completion-time output counter
	// (SGLang generation_tokens_total) is ahead of its live counter
	// (realtime_tokens_total decode): requests cannot complete tokens
	// that were never made, so one of the two drifts.
	RuleCompletionDrift = "completion_drift"
	// RulePrefixHitsFlat: prefix-cache queries rise while hits stay flat,
	// and the prompt's split does not confirm zero hits (it says tokens
	// were cached, or the engine has no split).
	RulePrefixHitsFlat = "prefix_hits_flat"
	// RuleAboveCeiling: the system rate is above the hardware's ceiling
	// for the window (analysis' ceiling_tps, where the facts give one).
	RuleAboveCeiling = "above_ceiling"
)

// Rules lists every sanity rule in the order the suspect field joins them.
var Rules = []string{RuleActivityZero, RuleGPUIdle, RuleCounterAsRate, RuleCompletionDrift, RulePrefixHitsFlat, RuleAboveCeiling}

// Bounds of the rules, documented with them.
const (
	// busyUtil is the NVML utilization (%) from which a GPU counts as
	// busy all the window: "~100 %" with the sampling's slack.
	busyUtil = 90
	// drift tolerates the completion counter ahead of the live one by
	// this fraction plus driftSlack tokens: the two are read from
	// different processes (tokenizer, scheduler) a moment apart.
	drift      = 0.05
	driftSlack = 1000
	// minPrefixQueries is the prefix-cache tokens queried in a window
	// from which hits that stay flat say something.
	minPrefixQueries = 1000
	// ceilingSlack lets the system rate pass the ceiling by 10 % before
	// the rule fires: the ceiling's facts (datasheet bandwidth, model
	// bytes) are exact to a few per cent.
	ceilingSlack = 1.10
)

// sanity sets a's suspect field to the comma-joined rules that fire,
// absent when none does. ceiling is the window's hardware ceiling in
// system tokens/s, absent where no facts give one. Direct calls, not a
// table of functions: a window analysed into reused storage stays off the
// heap.
func sanity(a *ServerWindow, ceiling window.Opt[float64]) {
	fired := [...]bool{
		activityZero(&a.ServerWindow) || flowing(&a.ServerWindow) && len(a.StuckGPUs) > 0,
		gpuIdle(&a.ServerWindow),
		a.CountersDoubted,
		completionDrift(&a.ServerWindow),
		prefixHitsFlat(a),
		aboveCeiling(a.SystemTPS, ceiling),
	}
	var b strings.Builder
	for i, f := range fired {
		if f {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(Rules[i])
		}
	}
	if b.Len() > 0 {
		a.Suspect = window.Some(b.String())
	}
}

// flowing says tokens were made in the window.
func flowing(w *window.ServerWindow) bool { return w.ExactTokens.OK && w.ExactTokens.V > 0 }

func activityZero(w *window.ServerWindow) bool {
	return flowing(w) && w.SMActive.OK && w.SMActive.V == 0 && w.GPUUtil.OK && w.GPUUtil.V >= busyUtil
}

// stuckGPUs returns the labels of w's GPUs (on its host) whose own window
// reads SM activity 0 at busy utilization while w's tokens flow: the rule
// per GPU, which catches one stuck GPU of several that the server's mean
// activity hides. nil when none (no allocation).
func stuckGPUs(w *window.ServerWindow, gpus []window.GPUWindow) []string {
	if !flowing(w) || len(w.GPUs) == 0 {
		return nil
	}
	var stuck []string
	for i := range gpus {
		g := &gpus[i]
		if g.Host != w.Host || !g.SMActive.OK || g.SMActive.V != 0 || !g.Util.OK || g.Util.V < busyUtil {
			continue
		}
		for _, l := range w.GPUs {
			if l == g.Label {
				stuck = append(stuck, l)
				break
			}
		}
	}
	return stuck
}

func gpuIdle(w *window.ServerWindow) bool {
	return flowing(w) && len(w.GPUs) > 0 && w.GPUUtilMax.OK && w.GPUUtilMax.V == 0
}

func completionDrift(w *window.ServerWindow) bool {
	live, done := w.Counts[sample.GenerationTokens], w.Counts[sample.CompletionTokens]
	// A counter tpsmon built starts when it started watching: its total
	// says nothing of the engine's.
	if !live.OK || !done.OK || live.Derived || done.Derived {
		return false
	}
	return done.Total > live.Total*(1+drift)+driftSlack
}

func prefixHitsFlat(a *ServerWindow) bool {
	q, h := a.Counts[sample.PrefixQueries], a.Counts[sample.PrefixHits]
	if !q.OK || !h.OK || q.Delta < minPrefixQueries || h.Delta > 0 {
		return false
	}
	// The split, where the engine has one, is a second witness: it
	// clears the hits counter when it too says nothing was cached.
	return !a.PromptCachedTokens.OK || a.PromptCachedTokens.V > 0
}

func aboveCeiling(tps, ceiling window.Opt[float64]) bool {
	return tps.OK && ceiling.OK && ceiling.V > 0 && tps.V > ceiling.V*ceilingSlack
}
