package sample

import (
	"time"
)

// Interval is what a source knows of a stretch of time (Start, End]: the
// tokens made in it, and what ran meanwhile. Log lines that report an
// average over their own interval, per-request log lines and tokens of
// completed requests are all intervals. A negative value is unknown.
type Interval struct {
	Start, End   time.Time
	Tokens       float64
	PromptTokens float64
	// UserTokens over UserSeconds is the speed one stream saw.
	UserTokens, UserSeconds float64
	Running, Waiting, KV    float64
	Preemptions             float64
	// Request marks one request's own span: it adds one to the running
	// concurrency for its duration, or from HeldStart where Held says the
	// server held it before Start.
	Request bool
	// Held is how long before End a Request's server held it, in seconds:
	// a llama.cpp request's slot from its selection, whose prompt and set-up
	// come before the first token its tokens' span (Start, End] starts
	// from. It counts in running over (End − Held, End]; no more than
	// End − Start (0 and unknown, -1, included): over (Start, End].
	Held float64
	// Observed says the source was watching all through the interval
	// (a log line's own interval); spread-back tokens are not.
	Observed bool
	// Hole says a line spoke for the interval but was refused (an
	// impossible value): nothing is known of it, and it is not observed,
	// however readable the log was meanwhile (Hole).
	Hole bool
	// A Request's own latencies, in seconds, as its line says them: time
	// to first token, time per output token after the first, end to end,
	// and queued before it ran. Negative: unknown.
	TTFT, TPOT, E2E, Queue float64
	// TTFTBasis says from when TTFT counts (and E2E, which starts there).
	TTFTBasis TTFTBasis
	// Failed marks a request that errored (a TGI request span's ERROR
	// line): a miss for every latency objective, in the window it ended
	// in. It carries nothing else.
	Failed bool
	// Output is a Request's whole output (Tokens is what no progress line
	// counted before it); negative: unknown.
	Output float64
	// SpecDrafted and SpecAccepted are a speculation tally (tokens the
	// draft proposed, and of them the target model accepted): a finished
	// llama.cpp request's, or vLLM's over its logging interval. An
	// interval that carries them carries nothing else. Negative: unknown.
	SpecDrafted, SpecAccepted float64
	// PromptCached is prompt tokens found in the prefix cache, beside the
	// computed PromptTokens: an SGLang prefill batch's, or a llama.cpp
	// request's (its own interval, which carries nothing else). Negative:
	// unknown.
	PromptCached float64
}

// TTFTBasis is from when a request's time to first token counts: what a
// log says of the request's arrival. The zero value is the narrowest.
type TTFTBasis uint8

const (
	// TTFTPrefill is the prompt's evaluation only (llama.cpp's prompt
	// eval time, which ends with the first token): the request's wait for
	// the server, its slot and its turn is not in it.
	TTFTPrefill TTFTBasis = iota
	// TTFTSlot counts from when the server's loop took the request into a
	// slot (llama.cpp's "selected slot" line): the HTTP handling and the
	// wait for the loop before it are not in it.
	TTFTSlot
	// TTFTHTTP counts from when the server's HTTP handler started on the
	// request (llama.cpp's "server_strea" line, -lv 4): only the
	// connection and the request's reading are not in it.
	TTFTHTTP
	// NumTTFTBases is how many bases there are.
	NumTTFTBases
)

var ttftBasisNames = [NumTTFTBases]string{"prefill", "slot", "http"}

// String is the basis as the ttft_basis field writes it.
func (b TTFTBasis) String() string {
	if b < NumTTFTBases {
		return ttftBasisNames[b]
	}
	return "unknown"
}

// Unknown returns an interval over (start, end] with every value unknown.
func Unknown(start, end time.Time) Interval {
	return Interval{Start: start, End: end, Tokens: -1, PromptTokens: -1, UserTokens: -1, UserSeconds: -1,
		Running: -1, Waiting: -1, KV: -1, Preemptions: -1, TTFT: -1, TPOT: -1, E2E: -1, Queue: -1, Output: -1,
		SpecDrafted: -1, SpecAccepted: -1, PromptCached: -1, Held: -1}
}

// HeldStart is when a Request began to count in running: Held seconds
// before End where that is before Start, else Start.
func (iv Interval) HeldStart() time.Time {
	if h := iv.End.Add(-time.Duration(iv.Held * float64(time.Second))); iv.Held > 0 && h.Before(iv.Start) {
		return h
	}
	return iv.Start
}

// Hole returns the hole a refused line leaves over (start, end]: its
// windows are observed for less, never filled with what the line did not
// say (design §3).
func Hole(start, end time.Time) Interval {
	iv := Unknown(start, end)
	iv.Hole = true
	return iv
}

// CheckInterval validates what a log line (or a count spread back over
// time) says of (Start, End]: every value must be finite, not negative
// (-1 is "unknown") and within its bound; token counts within
// MaxTokensPerSecond over the interval, a second at least; the interval
// itself within [MinTime, MaxTime] and no longer than MaxIntervalSpan. An
// interval with any impossible value is refused whole: one broken figure
// makes the line's others doubtful too.
func CheckInterval(iv Interval) (Discard, bool) {
	span := iv.End.Sub(iv.Start)
	secs := max(span.Seconds(), 1)
	tok := MaxTokensPerSecond * secs
	// Every log line comes here: the common case, all values unknown or in
	// range, is a few comparisons (NaN fails them all); the checks below
	// say which value is wrong and why.
	if unknownOrIn(iv.Tokens, tok) && unknownOrIn(iv.PromptTokens, tok) && unknownOrIn(iv.UserTokens, tok) &&
		unknownOrIn(iv.UserSeconds, MaxRequests*secs) && unknownOrIn(iv.Preemptions, tok) &&
		unknownOrIn(iv.SpecDrafted, tok) && unknownOrIn(iv.SpecAccepted, iv.SpecDrafted) && unknownOrIn(iv.PromptCached, tok) &&
		unknownOrIn(iv.Running, MaxRequests) && unknownOrIn(iv.Waiting, MaxRequests) && unknownOrIn(iv.KV, 1) &&
		unknownOrIn(iv.Held, MaxIntervalSpan.Seconds()) && InRange(iv.Start) && InRange(iv.End) && !iv.End.Before(iv.Start) && span <= MaxIntervalSpan {
		return Discard{}, true
	}
	return intervalDiscard(iv, secs, tok)
}

// intervalDiscard says which of the interval's values is wrong, in the
// order they are checked.
func intervalDiscard(iv Interval, secs, tok float64) (Discard, bool) {
	for _, f := range [...]struct {
		name     string
		v, limit float64
	}{
		{"tokens", iv.Tokens, tok},
		{"prompt_tokens", iv.PromptTokens, tok},
		{"user_tokens", iv.UserTokens, tok},
		{"user_seconds", iv.UserSeconds, MaxRequests * secs},
		{"preemptions", iv.Preemptions, tok},
		{"spec_drafted", iv.SpecDrafted, tok},
		{"spec_accepted", iv.SpecAccepted, max(iv.SpecDrafted, 0)},
		{"prompt_cached", iv.PromptCached, tok},
		{"running", iv.Running, MaxRequests},
		{"waiting", iv.Waiting, MaxRequests},
		{"kv_cache_usage", iv.KV, 1},
		{"held", iv.Held, MaxIntervalSpan.Seconds()},
	} {
		if f.v == -1 {
			continue
		}
		if r, ok := RangeReason(f.v, 0, f.limit); !ok {
			return Discard{Series: f.name, Reason: r}, false
		}
	}
	if !InRange(iv.Start) || !InRange(iv.End) {
		return Discard{Series: "interval", Reason: OutOfRange}, false
	}
	if iv.End.Before(iv.Start) {
		return Discard{Series: "interval", Reason: Negative}, false
	}
	if iv.End.Sub(iv.Start) > MaxIntervalSpan {
		return Discard{Series: "interval", Reason: Huge}, false
	}
	return Discard{}, true
}

// unknownOrIn tells whether v is unknown (-1) or in [0, limit].
func unknownOrIn(v, limit float64) bool { return v == -1 || v >= 0 && v <= limit }
