package logline

import (
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Stream turns one server's records into the intervals the joiner
// spreads over windows. It remembers what earlier lines said: when each
// reporter last logged (a Stat line's span runs back to it), and how far
// running llama.cpp requests had got (so their final line adds only the
// rest).
type Stream struct {
	// MaxGap caps the span of a line whose average runs back to the
	// previous one.
	MaxGap time.Duration
	// Discarded is told of each line refused for an impossible value
	// (sample.CheckInterval); nil: not told.
	Discarded func(sample.Discard)
	// Hole is told of the stretch a refused line spoke for
	// (sample.Hole), for the joiner to take out of its windows'
	// coverage; nil: not told. A line refused for its own time or span
	// leaves none: where it belongs is what is wrong with it.
	Hole func(sample.Interval)

	last map[string]*time.Time
	// lastKey's entry of last: a log's stat lines nearly all come from
	// one reporter, whose line then costs no map lookup.
	lastKey    string
	lastOf     *time.Time
	aggregated bool
	progress   map[string]progress
	// prompts holds llama.cpp's prompt lines until their request's eval
	// line, by key: the request's time to first token, and its prompt
	// tokens, which go out on the request's span (they were evaluated in
	// its slot before its first token, not where the line is stamped: at
	// the request's end, with its eval line).
	prompts map[string]prompted
	// cached holds the llama.cpp tasks whose cache reuse was counted,
	// until their prompt line.
	cached map[string]bool
}

type prompted struct {
	dur    time.Duration
	tokens float64
}

type progress struct {
	tokens float64
	t      time.Time
}

// maxTracked bounds the per-reporter state (tasks that never finished).
const maxTracked = 4096

// Interval returns what r, read at time t, says of (start, t]. A line
// with an impossible value (NaN, a rate no server reaches) is refused and
// leaves no trace in the stream's memory: the next valid line of the same
// request carries on from the last valid one.
func (s *Stream) Interval(r Record, t time.Time) (sample.Interval, bool) {
	// Only these kinds move a request's progress, which a refused line
	// must leave as it was.
	tracked := r.Kind == Progress || r.Kind == Request || r.Kind == Iteration
	var p progress
	var had bool
	if tracked {
		p, had = s.progress[r.Key]
	}
	iv, ok := s.interval(&r, t)
	if !ok {
		return iv, false
	}
	if d, valid := sample.CheckInterval(iv); !valid {
		if had {
			s.progress[strings.Clone(r.Key)] = p
		} else if tracked {
			delete(s.progress, r.Key)
		}
		if s.Discarded != nil {
			s.Discarded(d)
		}
		// A refused progress or iteration line leaves no hole: the next
		// valid one carries on from the last valid one, over its span.
		// CheckInterval names the bounds "interval" when they are wrong.
		spoke := r.Kind == Stat || r.Kind == Request
		if s.Hole != nil && spoke && d.Series != "interval" && iv.End.After(iv.Start) {
			s.Hole(sample.Hole(iv.Start, iv.End))
		}
		return sample.Interval{}, false
	}
	return iv, true
}

// init makes the maps, and forgets reporters past maxTracked.
func (s *Stream) init() {
	if s.last == nil || len(s.last) > maxTracked {
		s.last = map[string]*time.Time{}
		s.lastKey, s.lastOf = "", nil
	}
	if s.progress == nil || len(s.progress) > maxTracked {
		s.progress = map[string]progress{}
	}
	if s.prompts == nil || len(s.prompts) > maxTracked {
		s.prompts = map[string]prompted{}
	}
	if s.cached == nil || len(s.cached) > maxTracked {
		s.cached = map[string]bool{}
	}
	if s.MaxGap == 0 {
		s.MaxGap = 5 * time.Minute
	}
}

func (s *Stream) interval(r *Record, t time.Time) (sample.Interval, bool) {
	s.init()
	switch r.Kind {
	case Stat:
		return s.stat(r, t)
	case Batch:
		iv := sample.Unknown(t, t)
		iv.PromptTokens, iv.PromptCached, iv.Running, iv.Waiting, iv.KV = r.Tokens, r.Cached, r.Running, r.Waiting, r.KV
		return iv, true
	case Progress:
		return s.progressed(r, t)
	case Request:
		return s.request(r, t)
	case Iteration:
		return s.iteration(r, t)
	case Cached:
		if r.Key == "" || s.cached[r.Key] {
			return sample.Interval{}, false // a later batch of the same prompt
		}
		s.cached[strings.Clone(r.Key)] = true
		iv := sample.Unknown(t, t)
		iv.PromptCached = r.Cached
		return iv, true
	case Failed:
		// The request ended there, in error: a miss. (A llama.cpp
		// cancelled task is not one: the server stops tasks whose
		// client got every token too, llamacpp-real/run1.)
		iv := sample.Unknown(t, t)
		iv.Failed = true
		return iv, true
	case Spec:
		iv := sample.Unknown(t, t)
		iv.SpecDrafted, iv.SpecAccepted = r.Drafted, r.Accepted
		return iv, true
	}
	return sample.Interval{}, false
}

// stat spreads a Stat line's averages over the time since its reporter's
// previous line, or over the engine's interval.
func (s *Stream) stat(r *Record, t time.Time) (sample.Interval, bool) {
	if r.Aggregated {
		s.aggregated = true
	} else if s.aggregated && r.Key != "" {
		return sample.Interval{}, false // the aggregated line holds this engine already
	}
	gap := r.DefaultGap
	last := s.lastOf
	if last == nil || r.Key != s.lastKey {
		if last = s.last[r.Key]; last == nil {
			last = new(time.Time) // zero: no line before (a zero t changes no gap)
			s.last[r.Key] = last
		}
		s.lastKey, s.lastOf = r.Key, last
	}
	if prev := *last; !prev.IsZero() && t.After(prev) {
		d := t.Sub(prev)
		if r.GapIsExact && d <= s.MaxGap || d <= r.DefaultGap*3/2 {
			gap = d
		}
	} else if t.Equal(prev) {
		// At the previous line's very time (a stamp that says only the
		// second, several lines in it): that time is spoken for already,
		// and a second span would count it twice.
		gap = 0
	}
	*last = t
	iv := sample.Unknown(t.Add(-gap), t)
	if r.GenTPS >= 0 {
		iv.Tokens = r.GenTPS * gap.Seconds()
	}
	if r.PromptTPS >= 0 {
		iv.PromptTokens = r.PromptTPS * gap.Seconds()
	}
	iv.Running, iv.Waiting, iv.KV, iv.Preemptions = r.Running, r.Waiting, r.KV, r.Preemptions
	return iv, true
}

// progressed is what a running request decoded since its previous
// progress line.
func (s *Stream) progressed(r *Record, t time.Time) (sample.Interval, bool) {
	prev, ok := s.progress[r.Key]
	// A copy: the map keeps the key of its last store, and a parser's key
	// may share its memory with many (keyArena).
	s.progress[strings.Clone(r.Key)] = progress{r.Tokens, t}
	var iv sample.Interval
	switch {
	case ok && r.Tokens > prev.tokens && t.After(prev.t):
		iv = sample.Unknown(prev.t, t)
		iv.Tokens = r.Tokens - prev.tokens
	case !ok && (r.SinceStartTPS > 0 || r.UserTPS > 0):
		// The first progress line: what was decoded so far, at the
		// request's average speed since it began (tg), which dates those
		// tokens exactly; the latest speed (tg_3s) only where no average
		// is given (docs/design.md).
		rate := r.SinceStartTPS
		if rate <= 0 {
			rate = r.UserTPS
		}
		d := time.Duration(r.Tokens / rate * float64(time.Second))
		iv = sample.Unknown(t.Add(-d), t)
		iv.Tokens = r.Tokens
		if r.InSlot > d {
			iv.Held = r.InSlot.Seconds() // its slot since before its first token
		}
	default:
		return sample.Interval{}, false
	}
	iv.UserTokens, iv.UserSeconds = iv.Tokens, iv.End.Sub(iv.Start).Seconds()
	iv.Request = true
	return iv, true
}

// request is a finished request's span, less what its progress lines
// already counted.
func (s *Stream) request(r *Record, t time.Time) (sample.Interval, bool) {
	iv := sample.Unknown(t.Add(-r.Duration), t)
	if r.PromptTokens >= 0 {
		if r.Key == "" {
			iv.PromptTokens = r.PromptTokens
			return iv, true
		}
		if old, ok := s.prompts[r.Key]; ok && old.tokens >= 0 {
			// A prompt line whose eval line never came: its tokens
			// where it was stamped, as they would have been.
			iv.PromptTokens = old.tokens
			s.prompts[strings.Clone(r.Key)] = prompted{r.Duration, r.PromptTokens}
			delete(s.cached, r.Key)
			return iv, true
		}
		s.prompts[strings.Clone(r.Key)] = prompted{r.Duration, r.PromptTokens}
		delete(s.cached, r.Key)
		return sample.Interval{}, false
	}
	p, hasPrompt := s.prompts[r.Key]
	prompt := p.dur
	s.latencies(&iv, r)
	iv.Tokens = r.Tokens
	if hasPrompt {
		iv.PromptTokens = p.tokens
	}
	// It held its slot before the first token its eval time counts from:
	// since the slot was taken where the stamps say, else for its prompt's
	// processing (llama.cpp's total time).
	held := r.InSlot
	if held < 0 && hasPrompt && r.Key != "" {
		held = r.Duration + prompt
	}
	if held > r.Duration {
		iv.Held = held.Seconds()
	}
	iv.Running = r.Running // an engine step's scheduled requests (TensorRT-LLM); -1 else
	if r.UserTPS > 0 {
		iv.UserTokens, iv.UserSeconds = r.UserTPS*r.Duration.Seconds(), r.Duration.Seconds()
	}
	iv.Request = r.Iterations < 0 // an engine step is not a request
	if p, ok := s.progress[r.Key]; ok {
		// Progress lines already counted part of this request.
		delete(s.progress, r.Key)
		if p.t.After(iv.Start) && p.t.Before(t) {
			iv.Start = p.t
		}
		iv.Held = -1 // its first progress line counted the slot before its tokens
		iv.Tokens = max(0, r.Tokens-p.tokens)
		iv.UserTokens, iv.UserSeconds = iv.Tokens, t.Sub(iv.Start).Seconds()
	}
	return iv, true
}

// iteration is the tokens of the engine steps since the previous
// iteration line.
func (s *Stream) iteration(r *Record, t time.Time) (sample.Interval, bool) {
	prev, ok := s.progress[r.Key]
	s.progress[r.Key] = progress{r.Iterations, t}
	if !ok || !t.After(prev.t) {
		return sample.Interval{}, false
	}
	iters := r.Iterations - prev.tokens
	if iters < 0 {
		iters = r.Iterations // the server restarted
	}
	iv := sample.Unknown(prev.t, t)
	iv.Tokens, iv.Running = iters*max(0, r.Running), r.Running
	if r.Running > 0 {
		iv.UserTokens, iv.UserSeconds = iters, t.Sub(prev.t).Seconds()
	}
	return iv, true
}

// latencies gives a finished request's interval its own latencies: what
// its line says, and for llama.cpp the time to first token from its
// arrival where the log's stamps time it (Record.TTFT), else its prompt
// line's (the prefill, which ends with the first token: TTFTPrefill), end
// to end that and the decode together.
func (s *Stream) latencies(iv *sample.Interval, r *Record) {
	secs := func(d time.Duration) float64 {
		if d < 0 {
			return -1
		}
		return d.Seconds()
	}
	iv.TPOT, iv.E2E, iv.Queue = secs(r.TPOT), secs(r.Total), secs(r.Queue)
	iv.Output = r.Tokens
	if r.Key == "" {
		return
	}
	pr, ok := s.prompts[r.Key]
	if ok {
		delete(s.prompts, r.Key)
	}
	p := pr.dur
	if r.TTFT >= 0 {
		p, ok = r.TTFT, true
		iv.TTFTBasis = r.TTFTBasis
	}
	if ok {
		iv.TTFT = p.Seconds()
		if iv.E2E < 0 && r.Duration >= 0 {
			iv.E2E = (p + r.Duration).Seconds()
		}
	}
}
