package report

import (
	"context"
	"slices"
	"sync"
	"time"
)

// QueryTiming is one query of a report: InfluxDB's part (from sending it
// to the first byte of its answer: InfluxDB 1.8 runs a query whole
// before it sends it) and ours (reading the answer, decoding it and
// handing its series to the step that sums them).
type QueryTiming struct {
	Name string
	// Start is when it was sent, from the trace's start.
	Start  time.Duration
	Influx time.Duration
	Decode time.Duration
	Bytes  int
}

// Trace collects the timings of the queries run under a context that
// carries it (WithTrace): where a report's time goes.
type Trace struct {
	t0      time.Time
	mu      sync.Mutex
	Queries []QueryTiming
}

type traceKey struct{}
type nameKey struct{}

// WithTrace makes the queries run under ctx record into t.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	t.t0 = time.Now()
	return context.WithValue(ctx, traceKey{}, t)
}

// withName tells the trace which query a context runs.
func withName(ctx context.Context, name string) context.Context {
	if ctx.Value(traceKey{}) == nil {
		return ctx
	}
	return context.WithValue(ctx, nameKey{}, name)
}

// record notes one query's timing in ctx's trace, if it has one: sent,
// its answer begun (InfluxDB's part), then read from start to end (ours:
// decoding, and the steps' work on each series as it decodes).
func record(ctx context.Context, sent, began, start, end time.Time, bytes int) {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	if t == nil {
		return
	}
	name, _ := ctx.Value(nameKey{}).(string)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Queries = append(t.Queries, QueryTiming{Name: name, Start: sent.Sub(t.t0), Influx: began.Sub(sent), Decode: end.Sub(start), Bytes: bytes})
}

// InfluxBusy is how long at least one query was waiting on InfluxDB: with
// queries in flight together, their sum would count the same time twice.
func (t *Trace) InfluxBusy() time.Duration {
	t.mu.Lock()
	spans := slices.Clone(t.Queries)
	t.mu.Unlock()
	slices.SortFunc(spans, func(a, b QueryTiming) int { return int(a.Start - b.Start) })
	var busy, end time.Duration
	for _, q := range spans {
		s, e := q.Start, q.Start+q.Influx
		if s < end {
			s = end
		}
		if e > s {
			busy += e - s
			end = e
		}
	}
	return busy
}

// ByName sums the timings per query name, in the order first sent.
func (t *Trace) ByName() []QueryTiming {
	t.mu.Lock()
	defer t.mu.Unlock()
	spans := slices.Clone(t.Queries)
	slices.SortStableFunc(spans, func(a, b QueryTiming) int { return int(a.Start - b.Start) })
	var out []QueryTiming
	at := map[string]int{}
	for _, q := range spans {
		i, ok := at[q.Name]
		if !ok {
			i = len(out)
			at[q.Name] = i
			out = append(out, QueryTiming{Name: q.Name, Start: q.Start})
		}
		out[i].Influx += q.Influx
		out[i].Decode += q.Decode
		out[i].Bytes += q.Bytes
	}
	return out
}
