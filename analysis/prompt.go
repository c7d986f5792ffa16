package analysis

import (
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// prompt fills the prompt's split by where its KV came from, for engines
// that say (vLLM V1 prompt_tokens_by_source, SGLang realtime_tokens_total,
// llama.cpp prompt_tokens_cached_total): the computed, cached and
// transferred tokens of the window, exact counter deltas; the prefix hit
// rate, token-weighted (cached ÷ all three summed over the window, not a
// mean of per-request rates); and prompt_tps as the computed prefill rate,
// over the stretches the computed counter was observed. Without the split
// every one of them is absent and prompt_tps stays the engine's prompt
// counter's rate. The three add up to all prompt tokens by construction of
// the engines' series (tested per engine in collector).
func prompt(a *ServerWindow) {
	// The split is both counts: a computed count alone (llama.cpp before
	// its cached counter) says nothing of the cache.
	comp, cached := a.Counts[sample.PromptComputed], a.Counts[sample.PromptCached]
	if !comp.OK || !cached.OK {
		return
	}
	a.PromptComputedTokens = window.Some(comp.Int())
	a.PromptCachedTokens = window.Some(cached.Int())
	all := comp.Delta + cached.Delta
	if x := a.Counts[sample.PromptExternal]; x.OK {
		a.PromptExternalTokens = window.Some(x.Int())
		all += x.Delta
	}
	if all > 0 {
		a.PrefixHitRate = window.Some(cached.Delta / all)
	}
	if comp.RateOK {
		a.PromptTPS = window.Some(comp.Rate)
	} else {
		a.PromptTPS = window.Opt[float64]{}
	}
}
