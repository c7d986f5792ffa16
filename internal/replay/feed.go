package replay

import (
	"slices"
	"time"

	"github.com/tpsmon/tpsmon/collector"
)

// ivChunk is how many intervals a full chunk of intervals holds.
const ivChunk = 4096

// intervals holds a log's intervals in chunks: a long log's are never
// copied to grow one slice (the copying and the fresh memory cost replay
// more than parsing the lines), and a pointer to one stays valid. Only the
// first chunk grows as a slice does, so a short log costs no full chunk.
type intervals [][]collector.Interval

func (ivs *intervals) add(iv collector.Interval) {
	n := len(*ivs)
	switch {
	case n == 0:
		*ivs = append(*ivs, nil)
		n = 1
	case len((*ivs)[n-1]) == ivChunk:
		*ivs = append(*ivs, make([]collector.Interval, 0, ivChunk))
		n++
	}
	(*ivs)[n-1] = append((*ivs)[n-1], iv)
}

func (ivs intervals) len() int {
	n := 0
	for _, c := range ivs {
		n += len(c)
	}
	return n
}

// sortByEnd puts the intervals in the order of their ends, stably. A log's
// nearly always are: then it costs a look at each.
func (ivs *intervals) sortByEnd() {
	byEnd := func(a, b collector.Interval) int { return a.End.Compare(b.End) }
	var last *collector.Interval
	for _, c := range *ivs {
		if len(c) == 0 {
			continue
		}
		if !slices.IsSortedFunc(c, byEnd) || last != nil && byEnd(*last, c[0]) > 0 {
			all := slices.Concat(*ivs...)
			slices.SortStableFunc(all, byEnd)
			*ivs = intervals{all}
			return
		}
		last = &c[len(c)-1]
	}
}

// at is the i-th interval: every chunk but the last is full, unless
// sortByEnd made them one.
func (ivs intervals) at(i int) *collector.Interval {
	if len(ivs) == 1 {
		return &ivs[0][i]
	}
	return &ivs[i/ivChunk][i%ivChunk]
}

// feed hands out a recording's inputs in time order: the log's intervals
// (by their ends), a watch input for every second of the log's watched
// spans, made as they are handed out rather than held, and the scrapes and
// GPU readings. The order is the one a stable sort by time of the
// intervals, then the watch inputs, then the rest would give.
type feed struct {
	logs    intervals
	logNext int // index of the next interval in logs
	logLen  int
	others  []timed // in time order
	spans   []span  // in time order, disjoint
	tick    time.Time
}

func newFeed(logs intervals, others []timed, spans []span) feed {
	f := feed{logs: logs, logLen: logs.len(), others: others, spans: spans}
	if len(spans) > 0 {
		f.tick = spans[0].from
	}
	return f
}

func (f *feed) done() bool {
	return f.logNext == f.logLen && len(f.others) == 0 && len(f.spans) == 0
}

// next hands out the next input; the feed must not be done.
func (f *feed) next() timed {
	var log *collector.Interval
	if f.logNext < f.logLen {
		log = f.logs.at(f.logNext)
	}
	// At the same time a log interval comes first, then a watch input.
	tick := len(f.spans) > 0 && (log == nil || f.tick.Before(log.End))
	switch {
	case len(f.others) > 0 && (log == nil || f.others[0].t.Before(log.End)) && (!tick || f.others[0].t.Before(f.tick)):
		in := f.others[0]
		f.others = f.others[1:]
		return in
	case tick:
		return f.nextTick()
	}
	f.logNext++
	return timed{t: log.End, log: log}
}

func (f *feed) nextTick() timed {
	in := timed{t: f.tick, watch: true}
	f.tick = f.tick.Add(time.Second)
	if f.tick.After(f.spans[0].to) {
		f.spans = f.spans[1:]
		if len(f.spans) > 0 {
			f.tick = f.spans[0].from
		}
	}
	return in
}

// segment is a stretch of the inputs with no long silence in them.
type segment struct {
	n          int // inputs, watch inputs included
	start, end time.Time
	// reach is how long before its own time an input's observation
	// begins, at most.
	reach time.Duration
}

// segment says how many of the next inputs come before the first silence
// longer than unwatchedAfter, and when they begin and end; f is not moved
// on. The feed must not be done.
func (f feed) segment() segment {
	first := f.next()
	sg := segment{start: first.begin(), end: first.end(), reach: first.t.Sub(first.begin())}
	for sg.n = 1; !f.done(); sg.n++ {
		in := f.next()
		b := in.begin()
		if b.Sub(sg.end) > unwatchedAfter {
			break
		}
		if b.Before(sg.start) {
			sg.start = b
		}
		if e := in.end(); e.After(sg.end) {
			sg.end = e
		}
		sg.reach = max(sg.reach, in.t.Sub(b))
	}
	return sg
}
