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

// feed hands out a recording's inputs in time order with a watch input
// for every second of the log's watched spans merged in, made as they are
// handed out rather than held: the order is the one a stable sort by time
// of the inputs' log intervals, then the watch inputs, then the scrapes
// and GPU readings would give.
type feed struct {
	inputs []timed // in time order
	spans  []span  // in time order, disjoint
	tick   time.Time
}

func newFeed(inputs []timed, spans []span) feed {
	f := feed{inputs: inputs, spans: spans}
	if len(spans) > 0 {
		f.tick = spans[0].from
	}
	return f
}

func (f *feed) done() bool { return len(f.inputs) == 0 && len(f.spans) == 0 }

// tickFirst says whether the next watch input comes before the next input:
// at the same time, after a log interval and before anything else.
func (f *feed) tickFirst() bool {
	if len(f.spans) == 0 {
		return false
	}
	if len(f.inputs) == 0 {
		return true
	}
	in := f.inputs[0]
	return f.tick.Before(in.t) || f.tick.Equal(in.t) && in.log == nil
}

// next hands out the next input; the feed must not be done.
func (f *feed) next() timed {
	if !f.tickFirst() {
		in := f.inputs[0]
		f.inputs = f.inputs[1:]
		return in
	}
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

// segment is how many of the next inputs come before the first silence
// longer than unwatchedAfter, and when they begin and end; f is not moved
// on. The feed must not be done.
func (f feed) segment() (n int, start, end time.Time) {
	first := f.next()
	start, end = first.begin(), first.end()
	for n = 1; !f.done(); n++ {
		in := f.next()
		if in.begin().Sub(end) > unwatchedAfter {
			break
		}
		if b := in.begin(); b.Before(start) {
			start = b
		}
		if e := in.end(); e.After(end) {
			end = e
		}
	}
	return n, start, end
}
