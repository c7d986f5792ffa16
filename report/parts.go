package report

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
)

// The range's totals (time per state, each GPU's time, idle windows and
// energy, each server's tokens and lost throughput) are sums, which add
// up across periods: they are read from the coarsest series that holds
// each period whole. At the raw level the hours the hourly rollups cover
// come from them and the raw windows serve only the range's ragged ends
// and the hours not rolled up yet; at the hourly level whole days come
// from the daily rollups. InfluxDB's cost is per point read, so a day of
// raw windows read as 24 hourly points costs a sixtieth or less. The
// per-interval series keep the level's own resolution.

// coarser is the rollup a level's whole periods are read from.
var coarser = map[string]struct {
	level string
	every time.Duration
}{Raw: {Hourly, time.Hour}, Hourly: {Daily, 24 * time.Hour}}

// ServerTotals are each server's tokens and energy over the range: its
// tokens per joule, and the ranking's tokens, from sums that add up
// across periods (TokensPerJoule's ratio does not).
var ServerTotals = both("server_totals", list(same("sum", schema.FieldTokens), same("sum", schema.FieldEnergyJ)),
	rawServer, rollupServer, serverWhere+" GROUP BY "+ids(schema.TagHost, schema.TagServer))

// rangeParts splits f's range for the totals: the coarser rollup's whole
// periods it covers (up to its newest point), f's own level for the
// rest. Without such periods, or without the rollup, it is f alone.
func rangeParts(ctx context.Context, c querier, f Filter) []Filter {
	level := f.Level
	if level == "" {
		level = Raw
	}
	co, ok := coarser[level]
	if !ok {
		return []Filter{f}
	}
	a := f.From.UTC().Truncate(co.every)
	if a.Before(f.From) {
		a = a.Add(co.every)
	}
	b := f.To.UTC().Truncate(co.every)
	if !a.Before(b) {
		return []Filter{f}
	}
	// The rollup job writes whole periods in time order: those up to its
	// newest point are there, later ones may not be yet.
	covered, err := rolledUpTo(ctx, c, co.level, a, b)
	if err != nil || covered.IsZero() || covered.Before(a) {
		return []Filter{f} // no rollup to read (none kept, or not yet)
	}
	if end := covered.Add(co.every); end.Before(b) {
		b = end
	}
	var out []Filter
	for _, p := range []struct {
		level    string
		from, to time.Time
	}{{level, f.From, a}, {co.level, a, b}, {level, b, f.To}} {
		if p.from.Before(p.to) {
			g := f
			g.Level, g.From, g.To = p.level, p.from, p.to
			out = append(out, g)
		}
	}
	return out
}

// rolledUpTo is the start of the newest period of level in [from, to)
// that both the server and the GPU rollups hold; zero if either has none.
func rolledUpTo(ctx context.Context, c querier, level string, from, to time.Time) (time.Time, error) {
	var newest time.Time
	for i, m := range []string{schema.Server, schema.GPU} {
		s, err := c.Query(withName(ctx, "rolled_up_to"), fmt.Sprintf(`SELECT last(%q) FROM "tpsmon_%s"."%s_%s" WHERE time >= %dms AND time < %dms`,
			schema.FieldWindows, level, m, level, from.UnixMilli(), to.UnixMilli()))
		if err != nil {
			return time.Time{}, fmt.Errorf("report: %s rollups: %w", level, err)
		}
		if len(s) == 0 || len(s[0].Values) == 0 {
			return time.Time{}, nil
		}
		v, ok := influxql.Num(s[0].Values[0][0])
		if !ok {
			return time.Time{}, nil
		}
		t := time.Unix(int64(v), 0).UTC()
		if i == 0 || t.Before(newest) {
			newest = t
		}
	}
	return newest, nil
}

// Each state's time is one query per state on raw windows (a field to
// match), but on rollups every state's fields are in one point: one
// query reads them all, for a part (StateTime) or the range (StateTrend).
var (
	allStateTime = func() string {
		var sel []string
		for _, st := range States {
			w, s := schema.RollupField(st, schema.FieldWindows), schema.RollupField(st, schema.FieldSeconds)
			sel = append(sel, same("sum", w), same("sum", s))
		}
		return list(sel...)
	}()
	// allStateSeconds is every state's seconds alone, for the sums per
	// interval (rollupSeconds).
	allStateSeconds = func() string {
		var sel []string
		for _, st := range States {
			sel = append(sel, same("sum", schema.RollupField(st, schema.FieldSeconds)))
		}
		return list(sel...)
	}()
	StateTimeAll  = Query{Name: "state_time_all", Rollup: strings.Replace(StateTime.Rollup, "SELECT "+stateTime+" ", "SELECT "+allStateTime+" ", 1)}
	StateTrendAll = Query{Name: "state_trend_all", Rollup: strings.Replace(StateTrend.Rollup, "SELECT "+as("sum", stateField(schema.FieldSeconds), colSeconds)+" ", "SELECT "+allStateSeconds+" ", 1)}
)

// queryState is a query and the $state it is rendered for.
type queryState struct {
	q     Query
	state string
}

// stateQueries are the queries of each state's time over f: q per state
// on raw windows, all (one) on rollups.
func stateQueries(f Filter, q, all Query) []queryState {
	if f.Level != "" && f.Level != Raw {
		return []queryState{{all, ""}}
	}
	var out []queryState
	for _, st := range States {
		out = append(out, queryState{q, st})
	}
	return out
}

// stateRows hands each state's rows over each part to each, as q's rows
// (windows, seconds, timed, time) whichever query read them.
func (b *builder) stateRows(parts []Filter, q, all Query, each func(st string, tags map[string]string, row map[string]any) error) error {
	for _, part := range parts {
		bucketed := b.perBucket(part) && q.Name == StateTime.Name
		pq := q
		if bucketed {
			pq = b.totals(part, q)
		}
		for _, x := range stateQueries(part, pq, all) {
			text, err := part.Render(x.q, x.state)
			if err != nil {
				return err
			}
			err = b.seriesRows(x.q.Name, text, func(tags map[string]string, row map[string]any) error {
				if x.state != "" {
					if bucketed {
						if err := b.addToFleet(q, x.state, tags, row); err != nil {
							return err
						}
					}
					return each(x.state, tags, row)
				}
				for _, st := range States {
					w, okW := row[schema.RollupField(st, schema.FieldWindows)]
					sec, okS := row[schema.RollupField(st, schema.FieldSeconds)]
					if (!okW || w == nil) && (!okS || sec == nil) {
						continue // no window in st: no row of st's own query
					}
					r := map[string]any{"time": row["time"], colWindows: w, colSeconds: sec, colTimed: w}
					if err := each(st, tags, r); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// totalRows runs a totals query over each part of the range, in time
// order, and hands each row to each: the steps add the parts up.
func (b *builder) totalRows(q Query, state string, each func(tags map[string]string, row map[string]any) error) error {
	return b.partRows(b.totalParts(), q, state, each)
}

// partRows runs q for state over each of parts, in order, and hands each
// row of each series, with the series' tags, to each.
// Totals read per bucket (perBucket) add to the fleet's series too.
func (b *builder) partRows(parts []Filter, q Query, state string, each func(tags map[string]string, row map[string]any) error) error {
	for _, part := range parts {
		pq := q
		do := each
		if b.perBucket(part) && (q.Name == GPUTime.Name || q.Name == ServerTotals.Name) {
			pq = b.totals(part, q)
			do = func(tags map[string]string, row map[string]any) error {
				if err := b.addToFleet(q, state, tags, row); err != nil {
					return err
				}
				return each(tags, row)
			}
		}
		text, err := part.Render(pq, state)
		if err != nil {
			return err
		}
		if err := b.seriesRows(q.Name, text, do); err != nil {
			return err
		}
	}
	return nil
}

func (b *builder) totalParts() []Filter {
	if b.parts == nil {
		return []Filter{b.f}
	}
	return b.parts
}

// trendParts split the range for the fleet's sums per interval (GPU
// time and energy, tokens, time per state, unused GPUs) as totalParts
// do, when every bucket lies whole in one part: buckets of whole periods
// of the coarser rollup (hourly buckets of a raw range), which InfluxDB
// aligns to the epoch as the parts' edges are. Finer buckets read the
// level's own series over the range.
func (b *builder) trendParts() []Filter {
	co, ok := coarser[b.f.Level]
	if b.parts == nil || !ok || b.f.Interval <= 0 || b.f.Interval%co.every != 0 {
		return []Filter{b.f}
	}
	return b.parts
}

// withField narrows the rollup parts of parts to the periods from the
// first whose points of measurement m carry field (rollups written
// before a field was added lack it); the periods before are read from
// the level's own series, as one part with the raw part before them.
func (b *builder) withField(parts []Filter, m, field string) ([]Filter, error) {
	var out []Filter
	for _, p := range parts {
		if p.Level == b.f.Level {
			out = appendPart(out, p)
			continue
		}
		s, err := b.c.Query(withName(b.ctx, "rolled_up_with"), fmt.Sprintf(`SELECT first(%q) FROM "tpsmon_%s"."%s_%s" WHERE time >= %dms AND time < %dms`,
			field, p.Level, m, p.Level, p.From.UnixMilli(), p.To.UnixMilli()))
		if err != nil {
			return nil, fmt.Errorf("report: %s rollups: %w", p.Level, err)
		}
		from := p.To
		if len(s) > 0 && len(s[0].Values) > 0 {
			if v, ok := influxql.Num(s[0].Values[0][0]); ok {
				from = time.Unix(int64(v), 0).UTC()
			}
		}
		if from.After(p.From) {
			own := p
			own.Level, own.To = b.f.Level, from
			out = appendPart(out, own)
		}
		if from.Before(p.To) {
			p.From = from
			out = append(out, p)
		}
	}
	return out, nil
}

// appendPart appends p, joined to the last part when it is of the same
// level and ends where p begins.
func appendPart(parts []Filter, p Filter) []Filter {
	if n := len(parts); n > 0 && parts[n-1].Level == p.Level && parts[n-1].To.Equal(p.From) {
		parts[n-1].To = p.To
		return parts
	}
	return append(parts, p)
}

// trendRows runs a per-interval sums query over each of trendParts and
// hands each row to each; rows of one bucket come from one part.
func (b *builder) trendRows(q Query, each func(tags map[string]string, row map[string]any) error) error {
	return b.partRows(b.ownTrendParts(), q, "", each)
}
