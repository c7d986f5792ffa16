package analysis

import (
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// spec fills speculative decoding's numbers: the acceptance rate (drafted
// tokens the target model accepted ÷ tokens drafted) and the tokens made
// per verification step (1 + accepted ÷ steps: each step adds the target
// model's own token). From the engine's counters over the window where it
// has them (vLLM, llama.cpp: exact ratios of deltas), else its own gauges
// averaged over the window (SGLang: means of the engine's recent-step
// averages, approximate). A window without drafts has neither: no
// speculation, or none in it. Acceptance under th.SpecAccept is the
// finding spec_ineffective.
func spec(a *ServerWindow, th Thresholds) {
	acc, drafted, steps := a.Counts[sample.SpecAccepted], a.Counts[sample.SpecDraftTokens], a.Counts[sample.SpecDrafts]
	switch {
	case acc.OK && drafted.OK && drafted.Delta > 0:
		a.SpecAcceptRate = window.Some(min(acc.Delta/drafted.Delta, 1))
		if steps.OK && steps.Delta > 0 {
			a.TokensPerStep = window.Some(1 + acc.Delta/steps.Delta)
		}
	case a.Gauges[sample.SpecAcceptLength].OK && a.Gauges[sample.SpecAcceptLength].V > 0:
		// SGLang prints both gauges as 0 when it does not speculate; a
		// step makes at least one token, so 0 says none.
		a.TokensPerStep = a.Gauges[sample.SpecAcceptLength]
		if r := a.Gauges[sample.SpecAcceptRate]; r.OK {
			a.SpecAcceptRate = window.Some(min(r.V, 1))
		}
	}
	if a.SpecAcceptRate.OK {
		a.SpecFinding = window.Some("")
		if a.SpecAcceptRate.V < th.SpecAccept {
			a.SpecFinding = window.Some(FindingSpecIneffective)
		}
	}
}

// FindingSpecIneffective says speculation was on but its drafts were
// mostly rejected: the draft model costs more than it saves.
const FindingSpecIneffective = "spec_ineffective"
