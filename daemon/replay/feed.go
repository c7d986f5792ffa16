package replay

import (
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// feed hands out a recording's inputs in time order: the log's intervals
// (by their ends), a watch input for every second of the log's watched
// spans, made as they are handed out rather than held, and the scrapes and
// GPU readings. The order is the one a stable sort by time of the
// intervals, then the watch inputs, then the rest would give.
type feed struct {
	logs   pkReader
	others []timed // in time order
	spans  []span  // in time order, disjoint
	tick   time.Time
}

func newFeed(logs *packed, others []timed, spans []span) feed {
	f := feed{logs: logs.reader(), others: others, spans: spans}
	if len(spans) > 0 {
		f.tick = spans[0].from
	}
	return f
}

func (f *feed) done() bool {
	return !f.logs.more() && len(f.others) == 0 && len(f.spans) == 0
}

// next hands out the next input; the feed must not be done. A log
// interval handed out is valid until the next call.
func (f *feed) next() timed {
	var log *sample.Interval
	if f.logs.more() {
		log = f.logs.peek()
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
	f.logs.taken()
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
