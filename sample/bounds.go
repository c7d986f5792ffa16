package sample

import (
	"math"
	"time"
)

// Physical bounds on what one inference server can report. A value beyond
// them is a glitch (a corrupted page, a misprinted log line), not data:
// it is discarded and counted instead of reaching a window.
const (
	// MaxTokensPerSecond bounds every token rate of one server. The fastest
	// single servers (a node of eight current GPUs) make on the order of
	// 1e5 output tokens/s and a few 1e5 prompt tokens/s; 1e7 leaves a
	// hundredfold headroom and still rejects the 1e20 of a broken counter.
	// It is also the most tokens a window can hold per second of its length.
	MaxTokensPerSecond = 1e7
	// MaxRequests bounds request gauges (running, waiting) and the rate at
	// which latency seconds can accumulate (one second per second and
	// concurrent request).
	MaxRequests = 1e6
	// MaxCounter is the largest counter value taken: above 2^53 a float64
	// no longer counts single tokens, so increments would be lost.
	MaxCounter = 1 << 53
	// MaxIntervalSpan bounds the time one log line speaks for: no request
	// runs for a day, and no stat line averages over one. A longer span is
	// a misprinted duration; spread over it, the line's tokens would fill
	// days of windows with a wrong rate.
	MaxIntervalSpan = 24 * time.Hour
)

// MinTime and MaxTime bound the times tpsmon joins: line protocol stamps a
// point with int64 nanoseconds since 1970 (1677-09-21 to 2262-04-11), and
// windows are aligned on them; a day less at each end, so that a window
// around a time inside is inside too. A log line stamped beyond (a
// misprinted year) is refused, not joined into windows of another century.
var (
	MinTime = time.Unix(0, math.MinInt64).Add(24 * time.Hour)
	MaxTime = time.Unix(0, math.MaxInt64).Add(-24 * time.Hour)
)

// InRange says whether t is within [MinTime, MaxTime].
func InRange(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }
