// Package wake puts tpsmon's periodic work on shared instants.
//
// Each separate wakeup of an idle Go process costs far more than the work
// it does at tpsmon's rates: the runtime's monitor thread polls every
// 20 µs for a while after any activity, and idle threads spin looking for
// work. Measured here, six 1 s tickers at spread phases cost 2.5 ms of CPU
// a second and the same six on one instant 0.45 ms (docs/design.md,
// "Cost"). So every periodic loop (scrapes, GPU samples, log polls, the
// main loop, the status beat) ticks at whole multiples of its interval
// after one anchor shared by the process, and loops of the same or
// dividing intervals wake together.
package wake

import (
	"sync"
	"time"
)

var (
	once   sync.Once
	anchor time.Time // a whole second of wall time, with its monotonic reading
)

// shared returns the process's anchor, taken on first use.
func shared() time.Time {
	once.Do(func() {
		now := time.Now()
		// Add keeps the monotonic reading, so later ticks do not move
		// with the wall clock's steps.
		anchor = now.Add(-time.Duration(now.UnixNano() % int64(time.Second)))
	})
	return anchor
}

// next returns the first instant after now that is a whole multiple of d
// after anchor.
func next(anchor, now time.Time, d time.Duration) time.Time {
	since := now.Sub(anchor)
	k := since / d
	if since < 0 && since%d != 0 {
		k-- // round towards minus infinity
	}
	return anchor.Add((k + 1) * d)
}

// Ticker delivers a tick on C at every shared instant of its interval.
// Unlike time.Ticker it must be told when a tick was taken (Next).
type Ticker struct {
	C <-chan time.Time
	t *time.Timer
	d time.Duration
}

// NewTicker returns a ticker whose first tick comes at the next shared
// instant of d. A d below a millisecond is taken as a millisecond.
func NewTicker(d time.Duration) *Ticker {
	d = max(d, time.Millisecond)
	t := time.NewTimer(time.Until(next(shared(), time.Now(), d)))
	return &Ticker{C: t.C, t: t, d: d}
}

// Next arms the ticker for the next shared instant; call it after each
// receive from C. Instants missed while the receiver was busy are
// skipped, as time.Ticker drops ticks.
func (t *Ticker) Next() {
	t.t.Reset(time.Until(next(shared(), time.Now(), t.d)))
}

// Stop ends the ticker; no tick is delivered after it returns.
func (t *Ticker) Stop() { t.t.Stop() }

// Until returns how long until the next shared instant of d, for a loop
// that waits once rather than ticking.
func Until(d time.Duration) time.Duration {
	return time.Until(next(shared(), time.Now(), max(d, time.Millisecond)))
}
