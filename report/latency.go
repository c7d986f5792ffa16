package report

import (
	"fmt"
	"html/template"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
)

// What one user felt, per server over the range. Three queries per
// range, whatever the number of servers: the buckets' aggregates, their
// attainment's sums, and the latest windows under the SLO floor.
//
// A window's quantile is the quantile of its own requests (or token
// gaps). Windows' quantiles do not combine into the quantile of a
// bucket's requests, so a bucket carries what they do say: the median and
// the worst window, and bounds of the bucket's requests' quantile, which
// lies between the lowest and the highest of its windows' (the quantile
// of a mixture lies between its parts'), taken at their bucket edges
// where they come from histograms.
//
// The hourly rollups carry the same aggregates of each hour's windows
// (schema.LatencyRollup, AttainmentTerms), so a raw range charted in hourly
// buckets reads its rolled-up hours from them, the same numbers: a
// median of one hour's windows is the rollup's, medians of two periods
// do not make one, and no coarser bucket reads them.

// LatencyQuantiles are the quantile fields the report reads.
var LatencyQuantiles = schema.LatencyRollupQuantiles

// MaxMissed is how many of a server's windows under the SLO floor are
// listed, the latest first; the rest are counted.
const MaxMissed = 20

// Columns of the latency queries, which are also the rollup's field
// names (schema.LatencyRollup, AttainmentTerms).
const (
	colLatWindows = schema.FieldLatencyWindows
	colMetExact   = schema.FieldSLOMetExact      // requests that met the objectives, in exact windows
	colReqExact   = schema.FieldSLORequestsExact // requests of exact windows
	colMetLo      = schema.FieldSLOMetLo         // requests that surely met them
	colMetHi      = schema.FieldSLOMetHi         // requests that may have
	colMissed     = schema.FieldSLOMissedWindows // windows under the floor
	colExactWins  = schema.FieldSLOExactWindows
	colSLOWindows = schema.FieldSLOWindows
	colBasis      = "basis"
	colLatPoints  = "latency_points" // rollup points in a bucket
	suffixMedian  = schema.SuffixMedian
	suffixMax     = schema.SuffixMax
	suffixMin     = schema.SuffixMin
	suffixN       = schema.SuffixN
	suffixLoMin   = schema.SuffixLoMin
	suffixLoN     = schema.SuffixLoN
	suffixHiMax   = schema.SuffixHiMax
	suffixHiN     = schema.SuffixHiN
)

// mul is "a" * "b" AS "col".
func mul(a, b, col string) string { return id(a) + " * " + id(b) + " AS " + id(col) }

// latencyBucketsText reads schema.LatencyRollup per server and bucket
// from the raw windows, or (rollup) each bucket's period's from the
// rollup: counts and sums add, max and min are of the points', and a
// median is the one point's (latencyPoint leaves it out of a bucket of
// more points).
func latencyBucketsText(rollup bool) string {
	var sel []string
	from := rawServer
	if rollup {
		from = rollupServer
		sel = append(sel, as("count", colLatWindows, colLatPoints))
	}
	for _, a := range schema.LatencyRollup {
		if !rollup {
			sel = append(sel, as(a.Fn, a.Field, a.As))
			continue
		}
		fn := a.Fn
		switch fn {
		case "count":
			fn = "sum"
		case "median":
			fn = "max"
		}
		sel = append(sel, same(fn, a.As))
	}
	return "SELECT " + list(sel...) + " FROM " + from + " " + serverWhere + perInterval + ids(schema.TagHost, schema.TagServer) + " fill(none)"
}

// AttainmentTerms are the raw windows' terms of the attainment's sums:
// an attainment times its requests, summed, is the requests-weighted
// attainment, which InfluxQL has no aggregate for, so a subquery makes
// the products. Package rollup sums them per period under the same names.
var AttainmentTerms = list(mul(schema.FieldSLOAttainment, schema.FieldSLORequests, colMetExact),
	// slo_requests where slo_attainment is there (null times 0 is null).
	id(schema.FieldSLOAttainment)+" * 0 + "+id(schema.FieldSLORequests)+" AS "+id(colReqExact),
	mul(schema.FieldSLOAttainmentLo, schema.FieldSLORequests, colMetLo),
	mul(schema.FieldSLOAttainmentHi, schema.FieldSLORequests, colMetHi))

// AttainmentCols are AttainmentTerms' columns.
var AttainmentCols = []string{colMetExact, colReqExact, colMetLo, colMetHi}

// attainmentBucketsText reads, per server and bucket, the requests that
// met the objectives: sums of AttainmentTerms over the raw windows (only
// these four columns go through the subquery: one of every latency field
// cost 5-10 times the plain aggregates), or of the rollup's sums.
func attainmentBucketsText(rollup bool) string {
	var outer []string
	for _, c := range AttainmentCols {
		outer = append(outer, same("sum", c))
	}
	if rollup {
		return "SELECT " + list(outer...) + " FROM " + rollupServer + " " + serverWhere + perInterval + ids(schema.TagHost, schema.TagServer) + " fill(none)"
	}
	return "SELECT " + list(outer...) + " FROM (SELECT " + AttainmentTerms + " FROM " + rawServer + " " + serverWhere +
		" GROUP BY " + ids(schema.TagHost, schema.TagServer) + ") WHERE $timeFilter" + perInterval + ids(schema.TagHost, schema.TagServer) + " fill(none)"
}

var (
	// LatencyBuckets is each server's latency per bucket; its Rollup is
	// for buckets of one rollup period.
	LatencyBuckets = Query{Name: "latency_buckets", Text: latencyBucketsText(false), Rollup: latencyBucketsText(true)}
	// AttainmentBuckets is each server's requests that met the objectives
	// per bucket.
	AttainmentBuckets = Query{Name: "attainment_buckets", Text: attainmentBucketsText(false), Rollup: attainmentBucketsText(true)}
	// MissedWindows are each server's latest windows under the SLO floor
	// (slo_miss_phase set), MaxMissed at most.
	MissedWindows = Query{Name: "missed_windows",
		Text: "SELECT " + ids(schema.FieldSLOMissPhase, schema.FieldSLOAttainment, schema.FieldSLOAttainmentLo, schema.FieldSLOAttainmentHi,
			schema.FieldSLORequests, schema.FieldTTFTP90, schema.FieldITLP90, schema.FieldQueueP99) +
			" FROM " + rawServer + " " + serverWhere + " AND " + id(schema.FieldSLOMissPhase) + " =~ /./ GROUP BY " + ids(schema.TagHost, schema.TagServer) +
			fmt.Sprintf(" ORDER BY time DESC LIMIT %d", MaxMissed)}
	// TTFTBases are the bases each server's TTFT counted from, of those
	// that leave part of the user's wait out (schema.TTFTNarrowed): only
	// per-request log lines have the field, so it reads few points.
	TTFTBases = Query{Name: "ttft_bases",
		Text: "SELECT distinct(" + id(schema.FieldTTFTBasis) + ") AS " + id(colBasis) + " FROM " + rawServer + " " + serverWhere +
			" AND " + id(schema.FieldTTFTBasis) + " != 'http' GROUP BY " + ids(schema.TagHost, schema.TagServer)}
)

// ServerLatency is what one server's users felt over the range.
type ServerLatency struct {
	// Windows counts the windows with a latency field (latency_source).
	Windows int `json:"windows"`
	// Series is per bucket of the report's interval.
	Series []LatencyPoint `json:"series"`
	// Range is each quantile field over the whole range: its windows, the
	// worst, and the bounds of the range's requests' quantile (no median:
	// the buckets' medians do not make one).
	Range map[string]WindowQuantiles `json:"range"`
	// Attainment is over every window with one, weighted by its requests.
	Attainment *Attainment `json:"slo_attainment,omitempty"`
	// MissedWindows counts the windows under the SLO floor; Missed lists
	// the latest of them, MissedOmitted the others.
	MissedWindows int            `json:"missed_windows"`
	Missed        []MissedWindow `json:"missed,omitempty"`
	MissedOmitted int            `json:"missed_omitted,omitempty"`
	// MissedByPhase counts the listed windows by the phase blamed.
	MissedByPhase map[string]int `json:"missed_by_phase,omitempty"`
	// TTFTNarrowed lists the bases (schema.FieldTTFTBasis) of windows
	// whose TTFT left part of the user's wait out: "slot", "prefill".
	TTFTNarrowed []string `json:"ttft_narrowed_bases,omitempty"`
}

// LatencyPoint is one bucket of a server's latency.
type LatencyPoint struct {
	Time time.Time `json:"time"`
	// Windows counts the bucket's windows with a latency field.
	Windows int `json:"windows"`
	// Quantiles holds each quantile field of LatencyQuantiles the
	// bucket's windows have, by name (ttft_p90_s, ...).
	Quantiles  map[string]WindowQuantiles `json:"quantiles"`
	Attainment *Attainment                `json:"slo_attainment,omitempty"`
	// MissedWindows counts the bucket's windows under the SLO floor.
	MissedWindows int `json:"missed_windows,omitempty"`
}

// WindowQuantiles is one quantile field (ttft_p90_s, ...) over a set of
// windows, each window's value the quantile of its own requests.
type WindowQuantiles struct {
	// Windows counts the windows with a value or a bound; a window with
	// too few requests for the quantile has neither and is in none of the
	// numbers below.
	Windows int `json:"windows"`
	// WindowMedian is the median of the windows' values: the median
	// window's quantile, NOT the quantile of the windows' requests.
	WindowMedian *float64 `json:"window_median,omitempty"`
	// WindowMax is the worst window's value, of those with one (a window
	// above its histogram's last edge has none: AboveLastEdge).
	WindowMax *float64 `json:"window_max,omitempty"`
	// RequestsLo and RequestsHi bound the quantile of all the windows'
	// requests: the lowest window's lower bound and the highest window's
	// upper bound (a histogram window's bucket edges, else its value).
	// RequestsHi is absent when a window's quantile lay above its
	// histogram's last finite edge (AboveLastEdge).
	RequestsLo *float64 `json:"requests_lo,omitempty"`
	RequestsHi *float64 `json:"requests_hi,omitempty"`
	// Interpolated counts the windows whose value came from a histogram:
	// interpolated inside the bucket that holds it, its edges the bounds.
	Interpolated  int `json:"interpolated_windows"`
	AboveLastEdge int `json:"above_last_edge,omitempty"`
}

// Attainment is the share of requests that met every objective over a
// set of windows, each window weighted by its requests. Exact windows
// (per-request lines, or one objective on a bucket edge) and bounded ones
// (histograms) are kept apart; Lo and Hi are over all.
type Attainment struct {
	Requests float64 `json:"requests"`
	Windows  int     `json:"windows"`
	Lo       float64 `json:"lo"`
	Hi       float64 `json:"hi"`
	// Exact is the share when every window's was known exactly.
	Exact *float64 `json:"exact,omitempty"`
	// The exact windows: their requests and the share of them that met
	// the objectives.
	ExactWindows  int      `json:"exact_windows"`
	ExactRequests float64  `json:"exact_requests"`
	ExactShare    *float64 `json:"exact_share,omitempty"`
	// The bounded windows: the share of their requests lies in
	// [BoundedLo, BoundedHi].
	BoundedWindows  int      `json:"bounded_windows"`
	BoundedRequests float64  `json:"bounded_requests"`
	BoundedLo       *float64 `json:"bounded_lo,omitempty"`
	BoundedHi       *float64 `json:"bounded_hi,omitempty"`

	metExact, metLo, metHi float64
}

// MissedWindow is one window under the SLO floor and the phase blamed.
type MissedWindow struct {
	Time  time.Time `json:"time"`
	Phase string    `json:"slo_miss_phase"`
	// The window's attainment: exact, or its bounds.
	Exact    *float64 `json:"slo_attainment,omitempty"`
	Lo       float64  `json:"slo_attainment_lo"`
	Hi       float64  `json:"slo_attainment_hi"`
	Requests float64  `json:"slo_requests"`
	TTFTP90  *float64 `json:"ttft_p90_s,omitempty"`
	ITLP90   *float64 `json:"itl_p90_s,omitempty"`
	QueueP99 *float64 `json:"queue_p99_s,omitempty"`
}

// latency reads the servers' latency over the range; rollup levels have
// none, and say so.
func (b *builder) latency() error {
	if b.f.Level != "" && b.f.Level != Raw {
		b.r.LatencyNote = "latency is read from raw windows (ranges up to 48 h, or --level raw): the rollups carry no latency field"
		return nil
	}
	// Buckets by server and time: the attainment's sums come apart.
	pts := map[*ServerReport]map[int64]*LatencyPoint{}
	parts := b.latParts
	err := b.partRows(parts, LatencyBuckets, "", func(tags map[string]string, row map[string]any) error {
		p, ok := latencyPoint(row)
		if !ok {
			return nil
		}
		s := b.server(tags)
		if pts[s] == nil {
			pts[s] = map[int64]*LatencyPoint{}
		}
		pts[s][p.Time.Unix()] = &p
		return nil
	})
	if err != nil {
		return err
	}
	err = b.partRows(parts, AttainmentBuckets, "", func(tags map[string]string, row map[string]any) error {
		t, _ := influxql.Num(row["time"])
		if p := pts[b.server(tags)][int64(t)]; p != nil && p.Attainment != nil {
			a := p.Attainment
			a.metExact, a.ExactRequests, a.metLo, a.metHi = sum(row, colMetExact), sum(row, colReqExact), sum(row, colMetLo), sum(row, colMetHi)
			a.finish()
		}
		return nil
	})
	if err != nil {
		return err
	}
	for s, byTime := range pts {
		s.Latency = &ServerLatency{}
		// In time order: the range's sums add up the same every run.
		for _, t := range slices.Sorted(maps.Keys(byTime)) {
			p := byTime[t]
			if p.Attainment != nil {
				p.Attainment.finish()
			}
			s.Latency.add(*p)
		}
	}
	err = b.rows(MissedWindows, "", func(tags map[string]string, row map[string]any) error {
		s := b.server(tags)
		if s.Latency == nil {
			s.Latency = &ServerLatency{}
		}
		s.Latency.Missed = append(s.Latency.Missed, missedWindow(row))
		return nil
	})
	if err != nil {
		return err
	}
	err = b.rows(TTFTBases, "", func(tags map[string]string, row map[string]any) error {
		basis, _ := row[colBasis].(string)
		if schema.TTFTNarrowed(basis) == "" {
			return nil
		}
		s := b.server(tags)
		if s.Latency == nil {
			s.Latency = &ServerLatency{}
		}
		s.Latency.TTFTNarrowed = append(s.Latency.TTFTNarrowed, basis)
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range b.servers {
		if s.Latency != nil {
			s.Latency.finish()
		}
	}
	return nil
}

// latencyParts split the range as trendParts do where each bucket is one
// period of the coarser rollup (hourly buckets of a raw range): its
// points then hold each bucket's aggregates, a median among them.
// Rollups written before they carried latency have none: their hours
// are read from the raw windows (withField).
func (b *builder) latencyParts() ([]Filter, error) {
	if b.f.Level != Raw && b.f.Level != "" {
		return nil, nil // no latency (latency)
	}
	if co, ok := coarser[b.f.Level]; !ok || b.f.Interval != co.every {
		return []Filter{b.f}, nil
	}
	return b.withField(b.trendParts(), schema.Server, colLatWindows)
}

// num reads a cell; absent (nil) unless a number.
func num(row map[string]any, col string) *float64 {
	if v, ok := influxql.Num(row[col]); ok && !math.IsNaN(v) {
		return &v
	}
	return nil
}

func count(row map[string]any, col string) int {
	if v := num(row, col); v != nil {
		return int(*v)
	}
	return 0
}

func sum(row map[string]any, col string) float64 {
	if v := num(row, col); v != nil {
		return *v
	}
	return 0
}

// latencyPoint reads one bucket's row; false when it holds no window.
func latencyPoint(row map[string]any) (LatencyPoint, bool) {
	t, _ := influxql.Num(row["time"])
	p := LatencyPoint{Time: time.Unix(int64(t), 0).UTC(), Windows: count(row, colLatWindows), MissedWindows: count(row, colMissed),
		Quantiles: map[string]WindowQuantiles{}}
	// A bucket of rollup points holds one median per point: the median of
	// their windows is none of them (a server's tags changed within it).
	oneMedian := count(row, colLatPoints) <= 1
	for _, q := range LatencyQuantiles {
		wq := WindowQuantiles{Windows: count(row, q+suffixN), WindowMax: num(row, q+suffixMax)}
		if oneMedian {
			wq.WindowMedian = num(row, q+suffixMedian)
		}
		nLo, nHi := count(row, q+suffixLoN), count(row, q+suffixHiN)
		// A window above the last edge has a lower bound and neither a
		// value nor an upper bound (schema); one from request lines has
		// a value alone.
		wq.AboveLastEdge = max(0, nLo-nHi)
		wq.Windows += wq.AboveLastEdge
		wq.Interpolated = nHi
		wq.RequestsLo = lower(num(row, q+suffixMin), num(row, q+suffixLoMin))
		if wq.AboveLastEdge == 0 {
			wq.RequestsHi = upper(wq.WindowMax, num(row, q+suffixHiMax))
		}
		if wq.Windows > 0 {
			p.Quantiles[q] = wq
		}
	}
	if n := count(row, colSLOWindows); n > 0 {
		// Its shares come with the attainment's sums (AttainmentBuckets).
		p.Attainment = &Attainment{Windows: n, Requests: sum(row, schema.FieldSLORequests), ExactWindows: count(row, colExactWins)}
	}
	return p, p.Windows > 0 || p.Attainment != nil || len(p.Quantiles) > 0
}

// lower is the lesser of two optional numbers; upper the greater.
func lower(a, b *float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil || *a <= *b:
		return a
	}
	return b
}

func upper(a, b *float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil || *a >= *b:
		return a
	}
	return b
}

func share(met, of float64) *float64 {
	if of <= 0 {
		return nil
	}
	v := min(1, max(0, met/of))
	return &v
}

// finish draws the shares from the sums.
func (a *Attainment) finish() {
	a.BoundedWindows = a.Windows - a.ExactWindows
	a.BoundedRequests = a.Requests - a.ExactRequests
	a.ExactShare = share(a.metExact, a.ExactRequests)
	// The bounded windows' requests are the others: their met requests
	// are the whole's less the exact windows' (whose lo = hi = exact).
	if a.BoundedWindows > 0 {
		a.BoundedLo = share(a.metLo-a.metExact, a.BoundedRequests)
		a.BoundedHi = share(a.metHi-a.metExact, a.BoundedRequests)
	}
	if a.Requests > 0 {
		a.Lo, a.Hi = *share(a.metLo, a.Requests), *share(a.metHi, a.Requests)
	}
	if a.BoundedWindows == 0 {
		a.Exact = a.ExactShare
	}
}

// merge adds another set of windows' attainment.
func (a *Attainment) merge(o *Attainment) {
	a.Windows += o.Windows
	a.Requests += o.Requests
	a.ExactWindows += o.ExactWindows
	a.ExactRequests += o.ExactRequests
	a.metExact += o.metExact
	a.metLo += o.metLo
	a.metHi += o.metHi
	a.finish()
}

// add takes one bucket into the range.
func (l *ServerLatency) add(p LatencyPoint) {
	l.Series = append(l.Series, p)
	l.Windows += p.Windows
	l.MissedWindows += p.MissedWindows
	if p.Attainment != nil {
		if l.Attainment == nil {
			l.Attainment = &Attainment{}
		}
		l.Attainment.merge(p.Attainment)
	}
	if l.Range == nil {
		l.Range = map[string]WindowQuantiles{}
	}
	for q, w := range p.Quantiles {
		r, seen := l.Range[q]
		r.Windows += w.Windows
		r.Interpolated += w.Interpolated
		r.AboveLastEdge += w.AboveLastEdge
		r.WindowMax = upper(r.WindowMax, w.WindowMax)
		r.RequestsLo = lower(r.RequestsLo, w.RequestsLo)
		switch {
		case r.AboveLastEdge > 0:
			r.RequestsHi = nil
		case !seen:
			r.RequestsHi = w.RequestsHi
		default:
			r.RequestsHi = upper(r.RequestsHi, w.RequestsHi)
		}
		l.Range[q] = r
	}
}

// finish orders the series and says what the list of missed windows
// leaves out.
func (l *ServerLatency) finish() {
	sort.Slice(l.Series, func(i, j int) bool { return l.Series[i].Time.Before(l.Series[j].Time) })
	sort.SliceStable(l.Missed, func(i, j int) bool { return l.Missed[i].Time.After(l.Missed[j].Time) })
	slices.Sort(l.TTFTNarrowed)
	l.MissedOmitted = max(0, l.MissedWindows-len(l.Missed))
	for _, m := range l.Missed {
		if l.MissedByPhase == nil {
			l.MissedByPhase = map[string]int{}
		}
		l.MissedByPhase[m.Phase]++
	}
}

func missedWindow(row map[string]any) MissedWindow {
	t, _ := influxql.Num(row["time"])
	m := MissedWindow{Time: time.Unix(int64(t), 0).UTC(), Exact: num(row, schema.FieldSLOAttainment), Requests: sum(row, schema.FieldSLORequests),
		Lo: sum(row, schema.FieldSLOAttainmentLo), Hi: sum(row, schema.FieldSLOAttainmentHi),
		TTFTP90: num(row, schema.FieldTTFTP90), ITLP90: num(row, schema.FieldITLP90), QueueP99: num(row, schema.FieldQueueP99)}
	m.Phase, _ = row[schema.FieldSLOMissPhase].(string)
	return m
}

// latencyFindings says, per server with windows under its SLO floor, how
// many, where the listed ones' time went, and the range's attainment.
func latencyFindings(r *Report) []string {
	var out []string
	for _, s := range r.Servers {
		l := s.Latency
		if l == nil || l.MissedWindows == 0 {
			continue
		}
		phases := make([]string, 0, len(l.MissedByPhase))
		for ph := range l.MissedByPhase {
			phases = append(phases, ph)
		}
		sort.Slice(phases, func(i, j int) bool {
			a, b := phases[i], phases[j]
			if l.MissedByPhase[a] != l.MissedByPhase[b] {
				return l.MissedByPhase[a] > l.MissedByPhase[b]
			}
			return a < b
		})
		parts := make([]string, len(phases))
		for i, ph := range phases {
			parts[i] = fmt.Sprintf("%s in %d", ph, l.MissedByPhase[ph])
		}
		of := ""
		if l.MissedOmitted > 0 {
			of = fmt.Sprintf("of the latest %d, ", len(l.Missed))
		}
		f := fmt.Sprintf("server %s on %s was under its SLO floor in %d windows (%sthe time went to %s)", s.Server, s.Host, l.MissedWindows, of, strings.Join(parts, ", "))
		if a := l.Attainment; a != nil && a.Requests > 0 {
			f += "; " + a.String() + " over the range"
		}
		out = append(out, f)
	}
	return out
}

// String says the attainment in words: exact, or its bounds.
func (a *Attainment) String() string {
	if a.Exact != nil {
		return fmt.Sprintf("%.1f%% of %s requests met the objectives", 100**a.Exact, short(a.Requests))
	}
	return fmt.Sprintf("%.1f–%.1f%% of %s requests met the objectives (bounds: histograms)", 100*a.Lo, 100*a.Hi, short(a.Requests))
}

// latencyCharts are a server's TTFT and ITL per bucket (the median
// window's p50 and p90, and the band where the bucket's requests' p90
// lies) and its attainment per bucket.
func latencyCharts(l *ServerLatency, g timeGrid) []template.HTML {
	type cols struct{ p50, p90, lo, hi []float64 }
	get := func(p50, p90 string, scale float64) cols {
		c := cols{g.nan(), g.nan(), g.nan(), g.nan()}
		for _, p := range l.Series {
			i, ok := g.idx(p.Time)
			if !ok {
				continue
			}
			set := func(dst []float64, v *float64) {
				if v != nil {
					dst[i] = *v * scale
				}
			}
			set(c.p50, p.Quantiles[p50].WindowMedian)
			q := p.Quantiles[p90]
			set(c.p90, q.WindowMedian)
			if q.RequestsLo != nil && q.RequestsHi != nil {
				set(c.lo, q.RequestsLo)
				set(c.hi, q.RequestsHi)
			}
		}
		return c
	}
	chart := func(title, unit string, c cols) template.HTML {
		ch := g.chart(title, unit, line{"p50, median window", "#2f9d6a", c.p50}, line{"p90, median window", "#d6452f", c.p90})
		ch.bands = []band{{"p90 of all requests", "#d6452f", c.lo, c.hi}}
		return ch.svg()
	}
	ttft := get(schema.FieldTTFTP50, schema.FieldTTFTP90, 1)
	itl := get(schema.FieldITLP50, schema.FieldITLP90, 1000)
	lo, hi, exact := g.nan(), g.nan(), g.nan()
	for _, p := range l.Series {
		i, ok := g.idx(p.Time)
		if !ok || p.Attainment == nil || p.Attainment.Requests <= 0 {
			continue
		}
		if e := p.Attainment.Exact; e != nil {
			exact[i] = 100 * *e
			continue
		}
		lo[i], hi[i] = 100*p.Attainment.Lo, 100*p.Attainment.Hi
	}
	att := g.chart("SLO attainment per bucket (share of its requests)", "% of requests",
		line{"exact", "#2f6fd6", exact}, line{"lower bound", "#7a4fd6", lo}, line{"upper bound", "#8fb3de", hi})
	return []template.HTML{
		chart("Time to first token per bucket", "seconds", ttft),
		chart("Inter-token latency per bucket", "ms", itl),
		att.svg(),
	}
}

// latencyView is what the page says of a server's latency beside its
// charts.
type latencyView struct {
	Note, Attainment string
	Missed           []missedRow
	Omitted          int
}

type missedRow struct{ Time, Phase, Attainment, Requests, TTFT, ITL, Queue string }

func newLatencyView(l *ServerLatency) *latencyView {
	v := &latencyView{Omitted: l.MissedOmitted}
	interp := 0
	for _, q := range l.Range {
		interp += q.Interpolated
	}
	v.Note = "Latency charts: each line is the median window's quantile in the bucket (a window's p90 is of its own requests), not the quantile of the bucket's requests; the band is where the p90 of all the bucket's requests lies, between its lowest and highest window's."
	if interp > 0 {
		v.Note += " From histograms a window's quantile is interpolated inside the bucket that holds it, and the band runs to that bucket's edges; a bucket with a window above the last edge has no band."
	}
	for _, basis := range l.TTFTNarrowed {
		v.Note += fmt.Sprintf(" In some or all windows its TTFT %s.", schema.TTFTNarrowed(basis))
	}
	if a := l.Attainment; a != nil && a.Requests > 0 {
		v.Attainment = a.String()
		if a.Exact == nil && a.ExactWindows > 0 {
			v.Attainment += fmt.Sprintf("; of the %d exact windows' %s requests %.1f%%, of the %d bounded windows' %s requests %.1f–%.1f%%",
				a.ExactWindows, short(a.ExactRequests), 100*val0(a.ExactShare), a.BoundedWindows, short(a.BoundedRequests), 100*val0(a.BoundedLo), 100*val0(a.BoundedHi))
		}
	}
	opt := func(p *float64, scale float64, unit string) string {
		if p == nil {
			return "–"
		}
		return short(*p*scale) + " " + unit
	}
	for _, m := range l.Missed {
		row := missedRow{Time: m.Time.Format("2006-01-02 15:04:05"), Phase: m.Phase, Requests: short(m.Requests),
			TTFT: opt(m.TTFTP90, 1, "s"), ITL: opt(m.ITLP90, 1000, "ms"), Queue: opt(m.QueueP99, 1, "s")}
		if m.Exact != nil {
			row.Attainment = fmt.Sprintf("%.0f%%", 100**m.Exact)
		} else {
			row.Attainment = fmt.Sprintf("%.0f–%.0f%%", 100*m.Lo, 100*m.Hi)
		}
		v.Missed = append(v.Missed, row)
	}
	return v
}

func val0(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
