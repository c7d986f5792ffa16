package window

import (
	"fmt"
	"math"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Latency is what a server's sources said of its requests' latencies in
// one window; the analysis stage turns it into quantiles and SLO
// attainment. The joiner only counts: bucket growth over the window and
// the requests whose own lines ended in it.
type Latency struct {
	// Hists holds, per histogram, the observations made in the window.
	Hists [sample.NumHists]HistWindow
	// Requests are the requests whose own log line ended in the window,
	// with what the line said of them; none when Unkept.
	Requests []RequestTimes
	// Unkept, when more than MaxRequests requests ended in the window,
	// is how many did: then none is kept, as quantiles of the first ones
	// would be a wrong number, not a rough one.
	Unkept int
	// Finished and Aborted count the requests the engine finished in the
	// window, and of them those it aborted (vLLM's finished_reason).
	Finished, Aborted Opt[float64]
}

// HistWindow is one histogram's growth over a window: each bucket
// counter's increase, cumulative by edge, spread over the time between
// the scrapes around it as counters are (so fractional at the edges).
// Err says why the window's observations are unknown (a counter reset,
// buckets that changed, readings in doubt): then no number is given.
type HistWindow struct {
	OK    bool
	Le    []float64
	Count []float64
	// Sum is the growth of the observations' sum, when HasSum (the page
	// has a _sum).
	Sum    float64
	HasSum bool
	Err    string
}

// Total returns the observations the window holds.
func (h HistWindow) Total() float64 {
	if len(h.Count) == 0 {
		return 0
	}
	return h.Count[len(h.Count)-1]
}

// RequestTimes is one request's own latencies in seconds, negative where
// its line does not say.
type RequestTimes struct {
	TTFT, TPOT, E2E, Queue float64
	Tokens                 float64          // output tokens
	TTFTBasis              sample.TTFTBasis // from when TTFT (and E2E) count
	Failed                 bool             // errored or aborted: a miss
}

// histTrack follows one histogram of one server: its last reading, and
// the growth spread over the open windows.
type histTrack struct {
	last  sample.Histogram
	lastT time.Time
	ok    bool
	// heldT is the last sample since lastT whose page's histogram was
	// left unread (sample.Server.HistsHeld) and heldGap the longest
	// silence before it: the server was read all along, and a reading
	// that comes after them is not one after a gap.
	heldT   time.Time
	heldGap time.Duration
	win     map[time.Time]*HistWindow
}

// hold notes a sample at t that left the histogram unread.
func (h *histTrack) hold(t time.Time) {
	from := h.lastT
	if h.heldT.After(from) {
		from = h.heldT
	}
	if !h.ok || !t.After(from) {
		return
	}
	h.heldGap = max(h.heldGap, t.Sub(from))
	h.heldT = t
}

// add takes a reading at t. The growth since the last reading is spread
// over (last, t] by time; a counter that fell, buckets that changed or a
// reading that is not a histogram make that stretch unknown. A stretch
// with a silence longer than maxGap, between readings or the samples
// held between them, is left out.
func (h *histTrack) add(t time.Time, cur sample.Histogram, w, maxGap time.Duration, open time.Time) {
	if !t.After(h.lastT) && h.ok {
		return
	}
	prev, prevT, had := h.last, h.lastT, h.ok
	gap := t.Sub(prevT)
	if h.heldT.After(prevT) {
		gap = max(h.heldGap, t.Sub(h.heldT))
	}
	h.last, h.lastT, h.ok = cur, t, true
	h.heldT, h.heldGap = time.Time{}, 0
	if !had || (maxGap > 0 && gap > maxGap) {
		return
	}
	err := growthErr(prev, cur)
	sum := cur.Sum - prev.Sum
	hasSum := sum >= 0 // NaN (no _sum) fails it
	for s := Start(prevT, w); s.Before(t); s = s.Add(w) {
		if !s.Add(w).After(open) {
			continue // closed already
		}
		_, f := overlap(prevT, t, s, s.Add(w))
		if f == 0 {
			continue
		}
		if h.win == nil {
			h.win = map[time.Time]*HistWindow{}
		}
		acc := h.win[s]
		if acc == nil {
			acc = &HistWindow{OK: true, HasSum: true}
			h.win[s] = acc
		}
		if acc.Err != "" {
			continue
		}
		if err != nil {
			*acc = HistWindow{Err: err.Error()}
			continue
		}
		if acc.Le == nil {
			acc.Le = make([]float64, len(cur.Buckets))
			acc.Count = make([]float64, len(cur.Buckets))
			for i, b := range cur.Buckets {
				acc.Le[i] = b.Le
			}
		} else if len(acc.Le) != len(cur.Buckets) {
			*acc = HistWindow{Err: "histogram buckets changed"}
			continue
		}
		for i, b := range cur.Buckets {
			acc.Count[i] += (b.Count - prev.Buckets[i].Count) * f
		}
		if hasSum {
			acc.Sum += sum * f
		}
		acc.HasSum = acc.HasSum && hasSum
	}
}

// growthErr says why cur minus prev is no growth: a counter that fell,
// buckets that changed, a count no counter has; nil when it is.
func growthErr(prev, cur sample.Histogram) error {
	if len(prev.Buckets) != len(cur.Buckets) {
		return fmt.Errorf("histogram buckets changed: %d edges, then %d", len(prev.Buckets), len(cur.Buckets))
	}
	for i, b := range cur.Buckets {
		p := prev.Buckets[i]
		switch {
		case b.Le != p.Le:
			return fmt.Errorf("histogram buckets changed: le %g became %g", p.Le, b.Le)
		case math.IsNaN(b.Count) || math.IsInf(b.Count, 0):
			return fmt.Errorf("histogram bucket le %g reads %g", b.Le, b.Count)
		case b.Count < p.Count:
			return fmt.Errorf("histogram counter reset: le %g fell from %g to %g", b.Le, p.Count, b.Count)
		}
	}
	return nil
}

// take removes and returns the window at s; absent (OK false, no Err)
// when no two readings spanned any of it.
func (h *histTrack) take(s time.Time) HistWindow {
	acc := h.win[s]
	if acc == nil {
		return HistWindow{}
	}
	delete(h.win, s)
	for w := range h.win {
		if w.Before(s) {
			delete(h.win, w)
		}
	}
	return *acc
}

// rewind forgets what the readings said from cut on (the counters are in
// doubt, Sample.Rewind): the open windows they reached say so, and the
// next reading starts anew.
func (h *histTrack) rewind(cut time.Time, w time.Duration) {
	for s, acc := range h.win {
		if s.Add(w).After(cut) {
			*acc = HistWindow{Err: "readings in doubt (suspect counters)"}
		}
	}
	h.ok = false
}

// addLatencies takes a sample's histograms.
func (j *Joiner) addLatencies(st *serverState, s sample.Server) {
	if !s.Rewind.IsZero() {
		for h := range st.hists {
			st.hists[h].rewind(s.Rewind, j.cfg.Window)
		}
	}
	if s.Suspect {
		return
	}
	if s.HistsHeld {
		for h := range st.hists {
			st.hists[h].hold(s.Time)
		}
		return
	}
	j.addHists(st, s)
}

func (j *Joiner) addHists(st *serverState, s sample.Server) {
	for h := range sample.NumHists {
		if s.HasHist[h] {
			st.hists[h].add(s.Time, s.Hists[h], j.cfg.Window, j.cfg.MaxGap, j.next)
		}
	}
}

// AddHeld takes the histograms of a page its scraper held unread until a
// later scrape or its stop (collector.Result.Held), at the page's time:
// they go where that page's would have gone, the windows already closed
// excepted; false for a server not watched.
func (j *Joiner) AddHeld(name string, s sample.Server) bool {
	st, ok := j.byName[name]
	if !ok {
		return false
	}
	j.addHists(st, s)
	return true
}

// MaxRequests bounds the requests one server's window keeps: a window's
// memory must not grow with its requests (a log's backlog read at
// tail's 16 MiB a second lands in the windows open then, 300,000 requests
// in bench S2's). 65,536 is 6,500 requests a second for 10 s windows,
// 3.5 MiB.
const MaxRequests = 1 << 16

// addRequest keeps a finished request's latencies for the window its
// line ended in, or counts it past MaxRequests.
func (a *windowAcc) addRequest(iv sample.Interval) {
	if !iv.Failed && iv.TTFT < 0 && iv.TPOT < 0 && iv.E2E < 0 && iv.Queue < 0 {
		return
	}
	if a.unkept > 0 || len(a.reqs) >= MaxRequests {
		a.unkept += len(a.reqs) + 1
		a.reqs = nil
		return
	}
	a.reqs = append(a.reqs, RequestTimes{TTFT: iv.TTFT, TPOT: iv.TPOT, E2E: iv.E2E, Queue: iv.Queue, Tokens: iv.Output,
		TTFTBasis: iv.TTFTBasis, Failed: iv.Failed})
}

// latency closes what a server's sources said of latencies in [s, e).
func (j *Joiner) latency(st *serverState, acc *windowAcc, m *measured, s time.Time) Latency {
	var l Latency
	for h := range st.hists {
		l.Hists[h] = st.hists[h].take(s)
	}
	// The window's own: its accumulator goes to the spares without them.
	l.Requests, l.Unkept = acc.reqs, acc.unkept
	acc.reqs = nil
	if m.hasFinished {
		l.Finished = Some(m.finished)
	}
	if m.hasAborted {
		l.Aborted = Some(m.aborted)
	}
	return l
}
