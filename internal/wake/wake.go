// Package wake puts tpsmon's periodic work on shared instants.
//
// Each separate wakeup of an idle Go process costs far more than the work
// it does at tpsmon's rates: the runtime's monitor thread polls every
// 20 µs for a while after activity, and idle threads spin looking for
// work. Measured here, six 1 s tickers at spread phases cost 2.5 ms of CPU
// a second and the same six on one instant 0.45 ms (docs/design.md §9).
// So every periodic loop (scrapes, GPU samples, log polls, the main loop,
// the status beat) ticks at whole multiples of its interval in Unix time,
// as windows begin, and loops of the same or dividing intervals wake
// together however late each one started.
package wake

import "time"

// Slot numbers the stretch of length d that holds t: the whole multiples
// of d in Unix time, as the instants here and windows are counted.
func Slot(t time.Time, d time.Duration) int64 {
	ns := t.UnixNano()
	k := ns / int64(d)
	if ns < 0 && ns%int64(d) != 0 {
		k-- // towards minus infinity
	}
	return k
}

// next returns the first instant after now that is a whole multiple of d
// in Unix time. It carries no monotonic reading: the instants follow the
// wall clock, the same one for every loop (and a test's bubble).
func next(now time.Time, d time.Duration) time.Time {
	return time.Unix(0, (Slot(now, d)+1)*int64(d))
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
	t := time.NewTimer(time.Until(next(time.Now(), d)))
	return &Ticker{C: t.C, t: t, d: d}
}

// Next arms the ticker for the next shared instant; call it after each
// receive from C. Instants missed while the receiver was busy are
// skipped, as time.Ticker drops ticks.
func (t *Ticker) Next() {
	t.t.Reset(time.Until(next(time.Now(), t.d)))
}

// Stop ends the ticker; no tick is delivered after it returns.
func (t *Ticker) Stop() { t.t.Stop() }
