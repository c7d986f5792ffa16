package report

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
)

// Report is what a time range of the fleet says.
type Report struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Host   string    `json:"host,omitempty"`
	Server string    `json:"server,omitempty"`
	// Level is the series read: raw windows, or the 1h or 1d rollups.
	Level string `json:"level"`
	// Interval is the charts' bucket.
	Interval string `json:"interval"`
	// Window is the windows' length as the data says (raw level only):
	// one length, or the lengths seen.
	Window string `json:"window,omitempty"`
	// GPUHours is every GPU's observed time; the states below add up to it.
	GPUHours float64 `json:"gpu_hours"`
	Tokens   float64 `json:"tokens"`
	// TokensPerGPUHour and TokensPerJoule are the fleet's, over all GPUs.
	TokensPerGPUHour *float64 `json:"tokens_per_gpu_hour,omitempty"`
	TokensPerJoule   *float64 `json:"tokens_per_joule,omitempty"`
	// Cost is GPU-hours at the configured prices; absent without prices.
	Cost                *float64       `json:"cost,omitempty"`
	CostPerMillionToken *float64       `json:"cost_per_million_tokens,omitempty"`
	Findings            []string       `json:"findings"`
	Waste               []StateHours   `json:"gpu_hours_by_state"`
	Fleet               []FleetPoint   `json:"fleet"`
	Servers             []ServerReport `json:"servers"`
	GPUs                []GPUReport    `json:"gpus"`
	// Unpriced lists GPU models without a price, when prices were given.
	Unpriced []string `json:"unpriced,omitempty"`
	// CurveSkipped counts the windows the operating curve left out, by
	// reason (NaN, negative or absurd values).
	CurveSkipped map[string]int `json:"operating_curve_skipped,omitempty"`
	// LatencyNote says why the servers have no latency (a rollup level).
	LatencyNote string `json:"latency_note,omitempty"`
	// Lost is each server's throughput below its decode ceiling, most
	// lost GPU-hours first; servers none of whose windows had a ceiling
	// last. LostTokens and LostGPUHours are the fleet's (absent when no
	// window had a ceiling), WindowsWithoutCeiling the server windows
	// that had none (a missing model fact or GPU peak: tpsmon check).
	Lost                  []Lost   `json:"lost_throughput"`
	LostTokens            *float64 `json:"lost_tokens,omitempty"`
	LostGPUHours          *float64 `json:"lost_gpu_hours,omitempty"`
	WindowsWithoutCeiling int      `json:"windows_without_ceiling"`
}

// Lost is what one server's windows fell short of their decode
// ceiling (the system tokens/s its GPUs could give at each window's
// running requests and KV occupancy), summed over the windows that carry
// one, each window clamped at zero (one above its ceiling loses nothing;
// its excess is AboveCeilingTokens, and a fact is then likely wrong).
type Lost struct {
	Host   string `json:"host"`
	Server string `json:"server"`
	GPUs   string `json:"gpus"`
	// LostTokens = Σ max(0, ceiling_tps − system_tps) × window_s.
	LostTokens *float64 `json:"lost_tokens,omitempty"`
	// LostGPUHours = Σ max(0, 1 − system_tps / ceiling_tps) × window_s ×
	// GPUs / 3600: the GPU time the same tokens would not have needed at
	// the ceiling. Comparable across models, so the ranking's key.
	LostGPUHours *float64 `json:"lost_gpu_hours,omitempty"`
	// LostShare is LostTokens over the tokens the ceiling allowed.
	LostShare          *float64 `json:"lost_share,omitempty"`
	CeilingTokens      float64  `json:"ceiling_tokens"`
	AboveCeilingTokens float64  `json:"above_ceiling_tokens"`
	// MBU is the mean over the windows with one, weighted by length.
	MBU                   *float64 `json:"mbu,omitempty"`
	CeilingHours          float64  `json:"ceiling_hours"`
	Windows               int      `json:"windows"`
	CeilingWindows        int      `json:"ceiling_windows"`
	WindowsWithoutCeiling int      `json:"windows_without_ceiling"`
	mbuSum, mbuSecs       float64
}

// StateHours is the GPU time spent in one state, and who spent it.
type StateHours struct {
	State    string  `json:"state"`
	GPUHours float64 `json:"gpu_hours"`
	Share    float64 `json:"share"` // of all GPU-hours
	By       []Who   `json:"by"`    // most first
}

// Who spent GPU-hours: a server on a host, or one unused GPU.
type Who struct {
	Host     string  `json:"host"`
	Server   string  `json:"server,omitempty"`
	GPU      string  `json:"gpu,omitempty"`
	UUID     string  `json:"uuid,omitempty"`
	GPUHours float64 `json:"gpu_hours"`
}

// FleetPoint is the fleet over one interval. Absent ratios are nil.
type FleetPoint struct {
	Time             time.Time          `json:"time"`
	TPS              float64            `json:"tps"`
	GPUHours         float64            `json:"gpu_hours"`
	TokensPerGPUHour *float64           `json:"tokens_per_gpu_hour,omitempty"`
	TokensPerJoule   *float64           `json:"tokens_per_joule,omitempty"`
	StateGPUHours    map[string]float64 `json:"state_gpu_hours"`
}

// ServerReport is one server over the range.
type ServerReport struct {
	Host             string             `json:"host"`
	Server           string             `json:"server"`
	GPUs             string             `json:"gpus"`
	TokensPerJoule   *float64           `json:"tokens_per_joule,omitempty"`
	TokensPerGPUHour *float64           `json:"tokens_per_gpu_hour,omitempty"`
	Tokens           float64            `json:"tokens"`
	GPUHours         float64            `json:"gpu_hours"`
	StateShare       map[string]float64 `json:"state_share"`
	Series           []Point            `json:"series"`
	// Suspect counts the windows each sanity rule doubted (raw level only).
	Suspect map[string]int `json:"suspect,omitempty"`
	// OperatingCurve is the server's curves: one per model, engine, GPU
	// set and kind of window (analysis/curve).
	OperatingCurve []curve.Curve `json:"operating_curve,omitempty"`
	// Latency is what the server's users felt (raw windows that carry
	// latency fields).
	Latency *ServerLatency `json:"latency,omitempty"`
}

// Point is one interval of a server's series; negative is absent.
type Point struct {
	Time       time.Time `json:"time"`
	SystemTPS  float64   `json:"system_tps"`
	PerUserTPS float64   `json:"per_user_tps"`
	Running    float64   `json:"running"`
	GPUUtil    float64   `json:"gpu_util"`
}

// GPUReport is one GPU over the range.
type GPUReport struct {
	Host      string  `json:"host"`
	GPU       string  `json:"gpu"`
	UUID      string  `json:"uuid"`
	Model     string  `json:"model,omitempty"`
	Server    string  `json:"server"`
	Hours     float64 `json:"hours"`
	IdleShare float64 `json:"idle_share"` // of windows with util < 5 %
	MeanUtil  float64 `json:"mean_util"`
	Windows   int     `json:"windows"`
	EnergyJ   float64 `json:"energy_j"`
}

// querier runs InfluxQL.
type querier interface {
	Query(ctx context.Context, q string) ([]influxql.Series, error)
}

// Options are the report's settings beyond the filter.
type Options struct {
	// Prices is the price of a GPU-hour per GPU model (the gpu points'
	// name tag); "*" prices any other model.
	Prices map[string]float64
	// PerUserFloor is the per-user TPS objective of the operating point;
	// 0: DefaultPerUserFloor, negative: no operating point.
	PerUserFloor float64
	// OneLevel reads the totals from the level's own series alone, not
	// the coarser rollups' whole periods: slower, the same numbers up to
	// float rounding (what the fast path is checked against).
	OneLevel bool
}

// builder holds one Build's state.
type builder struct {
	ctx  context.Context
	c    querier
	f    Filter
	r    *Report
	lens map[string]map[string]time.Duration // measurement -> host -> window

	servers map[string]*ServerReport // by host/server
	gpus    map[string]*GPUReport    // by host/uuid/gpu/server
	// GPU-seconds per state, and GPU-hours per state of each server
	// (host NUL server) or unused GPU (host NUL NUL gpu NUL uuid).
	stateSecs map[string]float64
	byState   map[string]map[string]float64
	gpuEnergy float64 // joules of every GPU
	// ahead holds the queries opened before their steps read them: the
	// steps take them in their own order, so the report is built by one
	// goroutine in one order however the queries finished.
	ahead *ahead
	// parts split the range for the totals (rangeParts); nil: one.
	parts []Filter
	// latParts and curveParts split it for the latency and the operating
	// curve, from the rollups that carry them (latencyParts,
	// curveRangeParts).
	latParts   []Filter
	curveParts []curvePart
	// sums are the fleet's per interval. With byBucket the totals of a
	// raw part are read per bucket, and their rows fill them (addToFleet)
	// where a query of the fleet's own would read the part again.
	sums     *fleetSums
	byBucket bool
}

// InFlight is how many queries a report has InfluxDB run at once:
// enough to overlap InfluxDB's work with the network and our decoding,
// few enough not to swamp a server that others query too.
const InFlight = 4

// fetch is one query a report will run: its name and rendered text.
type fetch struct{ name, text string }

// each runs one rendered query, or takes its answer opened ahead, and
// hands its series to fn one at a time as they decode.
func (b *builder) each(name, text string, fn func(influxql.Series) error) error {
	var s stream
	var ok bool
	var err error
	if b.ahead != nil {
		s, ok, err = b.ahead.take(text)
	}
	if !ok && err == nil {
		s, err = open(withName(b.ctx, name), b.c, text)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var fnErr error
	err = s.Each(func(x influxql.Series) error {
		fnErr = fn(x)
		return fnErr
	})
	switch {
	case fnErr != nil:
		return fnErr
	case err != nil:
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// seriesRows runs one rendered query and hands each row of each series,
// with the series' tags, to each; an error from each ends it.
func (b *builder) seriesRows(name, text string, each func(tags map[string]string, row map[string]any) error) error {
	return b.each(name, text, func(s influxql.Series) error {
		for _, row := range s.Rows() {
			if err := each(s.Tags, row); err != nil {
				return err
			}
		}
		return nil
	})
}

// fetches are the queries build will run, rendered, in about the order
// its steps take them (the curve, the totals of each part, then the
// series per interval); a query that does not render is left to its
// step, which returns the error.
func (b *builder) fetches() []fetch {
	type qs = queryState
	raw := b.f.Level == "" || b.f.Level == Raw
	var out []fetch
	add := func(f Filter, x qs) {
		if text, err := f.Render(x.q, x.state); err == nil {
			out = append(out, fetch{x.q.Name, text})
		}
	}
	for _, part := range b.curveParts {
		add(part.f, qs{q: part.q})
	}
	for _, part := range b.totalParts() {
		for _, x := range []qs{{q: LostThroughput}, {q: b.totals(part, GPUTime)}, {q: GPUIdle}, {q: b.totals(part, ServerTotals)}} {
			add(part, x)
		}
		for _, x := range stateQueries(part, b.totals(part, StateTime), StateTimeAll) {
			add(part, x)
		}
	}
	if raw {
		for _, part := range b.latParts {
			add(part, qs{q: LatencyBuckets})
			add(part, qs{q: AttainmentBuckets})
		}
	}
	for _, part := range b.trendParts() {
		add(part, qs{q: ServerSeries})
	}
	if raw {
		for _, q := range []Query{MissedWindows, TTFTBases, SuspectWindows} {
			add(b.f, qs{q: q})
		}
	}
	for _, part := range b.ownTrendParts() {
		for _, x := range append([]qs{{q: FleetGPU}}, append(stateQueries(part, StateTrend, StateTrendAll), qs{q: UnusedTrend}, qs{q: FleetTokens})...) {
			add(part, x)
		}
	}
	return out
}

// perBucket reads a raw part's totals per bucket too (byBucket).
func (b *builder) perBucket(part Filter) bool { return b.byBucket && part.Level == b.f.Level }

// totals is q as the totals read part: per bucket where perBucket, rows
// the steps add up as they add up parts, and addToFleet adds to the
// fleet's series.
func (b *builder) totals(part Filter, q Query) Query {
	if !b.perBucket(part) {
		return q
	}
	return Query{Name: q.Name, Text: strings.Replace(q.Text, " GROUP BY ", perInterval, 1) + " fill(none)"}
}

// ownTrendParts are the parts the fleet's series read themselves: the
// trend parts but those the totals read per bucket.
func (b *builder) ownTrendParts() []Filter {
	var out []Filter
	for _, p := range b.trendParts() {
		if !b.perBucket(p) {
			out = append(out, p)
		}
	}
	return out
}

// addToFleet adds a row of a raw part's totals, read per bucket, to the
// fleet's series as FleetGPU, UnusedTrend, StateTrend (state st) and
// FleetTokens would have read it.
func (b *builder) addToFleet(q Query, st string, tags map[string]string, row map[string]any) error {
	f := b.sums
	switch q.Name {
	case GPUTime.Name:
		secs, err := b.seconds(schema.GPU, tags[schema.TagHost], row)
		if err != nil {
			return err
		}
		p := f.addGPU(secs, row)
		if tags[schema.TagServer] == "" {
			p.StateGPUHours[Unused] += secs / 3600
		}
	case StateTime.Name:
		secs, err := b.seconds(schema.Server, tags[schema.TagHost], row)
		if err != nil {
			return err
		}
		f.at(row).StateGPUHours[st] += secs * float64(gpuCount(tags[schema.TagGPUs])) / 3600
	case ServerTotals.Name:
		v, _ := influxql.Num(row[schema.FieldTokens])
		f.tokens[f.at(row).Time.Unix()] += v
	}
	return nil
}

// rows runs q for state and hands each row of each series, with the
// series' tags, to each; an error from each ends it.
func (b *builder) rows(q Query, state string, each func(tags map[string]string, row map[string]any) error) error {
	text, err := b.f.Render(q, state)
	if err != nil {
		return err
	}
	return b.seriesRows(q.Name, text, each)
}

// seconds turns a row of windows, seconds and timed (windows with a known
// length) into observed seconds: untimed windows count at the host's
// window length read from the data of measurement m.
func (b *builder) seconds(m, host string, row map[string]any) (float64, error) {
	n, _ := influxql.Num(row[colWindows])
	s, _ := influxql.Num(row[colSeconds])
	timed, _ := influxql.Num(row[colTimed])
	if timed >= n {
		return s, nil
	}
	if b.lens[m] == nil {
		tf := fmt.Sprintf("time >= %dms AND time < %dms", b.f.From.UnixMilli(), b.f.To.UnixMilli())
		l, err := WindowLengths(b.ctx, b.c, m, tf)
		if err != nil {
			return 0, err
		}
		b.lens[m] = l
	}
	w, ok := b.lens[m][host]
	if !ok {
		return 0, fmt.Errorf("report: %s on %s: %v windows without window_s and too few to read their length from their spacing", m, host, n-timed)
	}
	return s + (n-timed)*w.Seconds(), nil
}

func gpuCount(tag string) int {
	if tag == "" {
		return 0
	}
	return len(strings.Split(tag, ","))
}

// Build reads the range of f and draws the findings. Every duration comes
// from the points: their window_s field, or for older points the spacing
// of their timestamps.
func Build(ctx context.Context, c querier, f Filter, o Options) (*Report, error) {
	if f.Level == "" {
		f.Level = Raw
	}
	r := &Report{From: f.From, To: f.To, Host: f.Host, Server: f.Server, Level: f.Level, Interval: f.Interval.String()}
	b := &builder{ctx: ctx, c: c, f: f, r: r, lens: map[string]map[string]time.Duration{},
		servers: map[string]*ServerReport{}, gpus: map[string]*GPUReport{},
		stateSecs: map[string]float64{}, byState: map[string]map[string]float64{}}
	if !o.OneLevel {
		if p := rangeParts(ctx, c, f); len(p) > 1 || p[0].Level != f.Level {
			b.parts = p
		}
	}
	b.sums = &fleetSums{pts: map[int64]*FleetPoint{}, tokens: map[int64]float64{}, energy: map[int64]float64{}}
	// A raw range in hourly buckets split at the rollups: its ragged ends
	// (each in a bucket or a few) are read once, per bucket, for the
	// totals and the fleet's series alike; InfluxDB's cost of a short
	// part is mostly per series and query (0.15 s of 1,600 GPUs' windows
	// over a minute, 0.25 s over an hour), not per window.
	if co, ok := coarser[f.Level]; ok && b.parts != nil && f.Interval == co.every {
		b.byBucket = true
	}
	if err := b.build(o); err != nil {
		return nil, err
	}
	return r, nil
}

// build runs the report's queries in turn, each filling its part.
func (b *builder) build(o Options) error {
	var err error
	if b.latParts, err = b.latencyParts(); err != nil {
		return err
	}
	if b.curveParts, err = b.curveRangeParts(); err != nil {
		return err
	}
	b.ahead = openAhead(b.ctx, b.c, b.fetches())
	defer b.ahead.close()
	// The operating curve first: its answer is the largest (a 90-day
	// range's daily cells are tens of MB), and read while InfluxDB runs
	// the others it ends no later than they do.
	for _, step := range []func() error{func() error { return b.operatingCurve(o.floor()) }, b.stateTime, b.gpuTime, b.gpuIdle} {
		if err := step(); err != nil {
			return err
		}
	}
	b.waste()
	for _, step := range []func() error{b.efficiency, b.serverSeries, b.fleet, b.suspects, b.latency, b.lost} {
		if err := step(); err != nil {
			return err
		}
	}
	r := b.r
	if m := b.lens[schema.Server]; len(m) > 0 {
		r.Window = describeLengths(m)
	}
	b.collect()
	b.price(o.Prices)
	r.Findings = findings(r)
	return nil
}

// server is the report of the server the tags name.
func (b *builder) server(tags map[string]string) *ServerReport {
	k := tags[schema.TagHost] + "/" + tags[schema.TagServer]
	s, ok := b.servers[k]
	if !ok {
		s = &ServerReport{Host: tags[schema.TagHost], Server: tags[schema.TagServer], StateShare: map[string]float64{}}
		b.servers[k] = s
	}
	if tags[schema.TagGPUs] != "" {
		s.GPUs = tags[schema.TagGPUs]
	}
	return s
}

// gpu is the report of the GPU (and the server it served) the tags name.
func (b *builder) gpu(tags map[string]string) *GPUReport {
	k := tags[schema.TagHost] + "/" + tags[schema.TagUUID] + "/" + tags[schema.TagGPU] + "/" + tags[schema.TagServer]
	g, ok := b.gpus[k]
	if !ok {
		g = &GPUReport{Host: tags[schema.TagHost], GPU: tags[schema.TagGPU], UUID: tags[schema.TagUUID], Server: tags[schema.TagServer]}
		b.gpus[k] = g
	}
	if tags[schema.TagName] != "" {
		g.Model = tags[schema.TagName]
	}
	return g
}

// stateTime reads each server's time per state; its GPUs' time takes its
// state.
func (b *builder) stateTime() error {
	serverSecs := map[string]float64{}
	err := b.stateRows(b.totalParts(), StateTime, StateTimeAll, func(st string, tags map[string]string, row map[string]any) error {
		secs, err := b.seconds(schema.Server, tags[schema.TagHost], row)
		if err != nil {
			return err
		}
		sr := b.server(tags)
		sr.StateShare[st] += secs
		serverSecs[sr.Host+"/"+sr.Server] += secs
		g := secs * float64(gpuCount(tags[schema.TagGPUs]))
		sr.GPUHours += g / 3600
		b.stateSecs[st] += g
		if b.byState[st] == nil {
			b.byState[st] = map[string]float64{}
		}
		b.byState[st][sr.Host+"\x00"+sr.Server] += g / 3600
		return nil
	})
	if err != nil {
		return err
	}
	for k, s := range b.servers {
		for st := range s.StateShare {
			if serverSecs[k] > 0 {
				s.StateShare[st] /= serverSecs[k]
			}
		}
	}
	return nil
}

// gpuTime reads the GPUs' observed time and energy, and whom they served;
// a GPU that served no server is unused.
func (b *builder) gpuTime() error {
	var gpuSecs float64
	unused := map[string]float64{}
	err := b.totalRows(GPUTime, "", func(tags map[string]string, row map[string]any) error {
		g := b.gpu(tags)
		n, _ := influxql.Num(row[colWindows])
		secs, err := b.seconds(schema.GPU, g.Host, row)
		if err != nil {
			return err
		}
		// Parts of the range weigh their mean by their windows (a
		// rollup's mean is over its windows).
		util, _ := influxql.Num(row[schema.FieldUtil])
		if g.Windows > 0 && int(n) > 0 {
			util = (g.MeanUtil*float64(g.Windows) + util*n) / (float64(g.Windows) + n)
		}
		if int(n) > 0 || g.Windows == 0 {
			g.MeanUtil = util
		}
		g.Windows += int(n)
		g.Hours += secs / 3600
		e, _ := influxql.Num(row[schema.FieldEnergyJ])
		g.EnergyJ += e
		gpuSecs += secs
		b.gpuEnergy += e
		if g.Server == "" {
			unused[g.Host+"\x00\x00"+g.GPU+"\x00"+g.UUID] += secs / 3600
			b.stateSecs[Unused] += secs
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.byState[Unused] = unused
	b.r.GPUHours = gpuSecs / 3600
	return nil
}

// gpuIdle reads each GPU's share of idle windows.
func (b *builder) gpuIdle() error {
	idle := map[*GPUReport]float64{}
	var order []*GPUReport
	err := b.totalRows(GPUIdle, "", func(tags map[string]string, row map[string]any) error {
		g := b.gpu(tags)
		n, _ := influxql.Num(row[colIdleWindows])
		if _, ok := idle[g]; !ok {
			order = append(order, g)
		}
		idle[g] += n
		return nil
	})
	for _, g := range order {
		if g.Windows > 0 {
			g.IdleShare = idle[g] / float64(g.Windows)
		}
	}
	return err
}

// suspects counts each server's suspect windows by rule; rollups do not
// carry the field, so only raw ranges have them.
func (b *builder) suspects() error {
	if b.f.Level != "" && b.f.Level != Raw {
		return nil
	}
	return b.rows(SuspectWindows, "", func(tags map[string]string, row map[string]any) error {
		v, _ := row[schema.FieldSuspect].(string)
		if v == "" {
			return nil
		}
		s := b.server(tags)
		if s.Suspect == nil {
			s.Suspect = map[string]int{}
		}
		for _, rule := range strings.Split(v, ",") {
			s.Suspect[rule]++
		}
		return nil
	})
}

// waste draws the GPU-hours of each state and who spent them, largest
// first.
func (b *builder) waste() {
	r := b.r
	for _, st := range append(append([]string{}, States...), Unused) {
		h := b.stateSecs[st] / 3600
		if h == 0 {
			continue // a state that did not occur is no row
		}
		sh := StateHours{State: st, GPUHours: h}
		if r.GPUHours > 0 {
			sh.Share = h / r.GPUHours
		}
		for k, v := range b.byState[st] {
			p := strings.Split(k, "\x00")
			w := Who{Host: p[0], Server: p[1], GPUHours: v}
			if len(p) == 4 {
				w.GPU, w.UUID = p[2], p[3]
			}
			sh.By = append(sh.By, w)
		}
		sort.Slice(sh.By, func(i, j int) bool {
			x, y := sh.By[i], sh.By[j]
			if rankKey(x.GPUHours) != rankKey(y.GPUHours) {
				return x.GPUHours > y.GPUHours
			}
			return x.Host+x.Server+x.GPU < y.Host+y.Server+y.GPU
		})
		r.Waste = append(r.Waste, sh)
	}
}

// efficiency reads tokens per joule and the servers' tokens, and draws
// tokens per GPU-hour and per joule, per server and in all.
func (b *builder) efficiency() error {
	r := b.r
	type sums struct {
		tokens, energy       float64
		hasTokens, hasEnergy bool
	}
	by := map[*ServerReport]*sums{}
	var order []*ServerReport
	err := b.totalRows(ServerTotals, "", func(tags map[string]string, row map[string]any) error {
		sr := b.server(tags)
		s := by[sr]
		if s == nil {
			s = &sums{}
			by[sr] = s
			order = append(order, sr)
		}
		if v, ok := influxql.Num(row[schema.FieldTokens]); ok {
			s.tokens += v
			s.hasTokens = true
		}
		if e, ok := influxql.Num(row[schema.FieldEnergyJ]); ok {
			s.energy += e
			s.hasEnergy = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, sr := range order {
		s := by[sr]
		if s.hasTokens && s.hasEnergy {
			// InfluxQL's division by zero is 0: TokensPerJoule's answer.
			v := 0.0
			if s.energy != 0 {
				v = s.tokens / s.energy
			}
			sr.TokensPerJoule = &v
		}
		sr.Tokens = s.tokens
		r.Tokens += sr.Tokens
		if sr.GPUHours > 0 {
			v := sr.Tokens / sr.GPUHours
			sr.TokensPerGPUHour = &v
		}
	}
	if r.GPUHours > 0 {
		v := r.Tokens / r.GPUHours
		r.TokensPerGPUHour = &v
	}
	if b.gpuEnergy > 0 {
		v := r.Tokens / b.gpuEnergy
		r.TokensPerJoule = &v
	}
	return nil
}

// serverSeries reads each server's rates per interval: a bucket of a
// whole rolled-up period from its one rollup point, whose means are the
// period's windows'.
func (b *builder) serverSeries() error {
	return b.partRows(b.trendParts(), ServerSeries, "", func(tags map[string]string, row map[string]any) error {
		t, _ := influxql.Num(row["time"])
		p := Point{Time: time.Unix(int64(t), 0).UTC(), SystemTPS: -1, PerUserTPS: -1, Running: -1, GPUUtil: -1}
		for col, dst := range map[string]*float64{schema.FieldSystemTPS: &p.SystemTPS, schema.FieldPerUserTPS: &p.PerUserTPS,
			schema.FieldRunning: &p.Running, schema.FieldGPUUtil: &p.GPUUtil} {
			if v, ok := influxql.Num(row[col]); ok {
				*dst = v
			}
		}
		sr := b.server(tags)
		sr.Series = append(sr.Series, p)
		return nil
	})
}

// collect puts the servers and GPUs into the report, in a stable order.
func (b *builder) collect() {
	r := b.r
	for _, s := range b.servers {
		r.Servers = append(r.Servers, *s)
	}
	sort.Slice(r.Servers, func(a, b int) bool {
		return r.Servers[a].Host+"/"+r.Servers[a].Server < r.Servers[b].Host+"/"+r.Servers[b].Server
	})
	for _, g := range b.gpus {
		r.GPUs = append(r.GPUs, *g)
	}
	sort.Slice(r.GPUs, func(a, b int) bool {
		x, y := r.GPUs[a], r.GPUs[b]
		if x.Host != y.Host {
			return x.Host < y.Host
		}
		if x.GPU != y.GPU {
			return x.GPU < y.GPU
		}
		return x.Server < y.Server
	})
}

func describeLengths(m map[string]time.Duration) string {
	seen := map[time.Duration]bool{}
	var ls []time.Duration
	for _, l := range m {
		if !seen[l] {
			seen[l] = true
			ls = append(ls, l)
		}
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	var s []string
	for _, l := range ls {
		s = append(s, l.String())
	}
	return strings.Join(s, ", ")
}

// fleetSums gathers the fleet's figures per interval start (Unix s).
type fleetSums struct {
	pts            map[int64]*FleetPoint
	tokens, energy map[int64]float64
}

// at is the point of the interval a row is of.
func (f *fleetSums) at(row map[string]any) *FleetPoint {
	t, _ := influxql.Num(row["time"])
	p, ok := f.pts[int64(t)]
	if !ok {
		p = &FleetPoint{Time: time.Unix(int64(t), 0).UTC(), StateGPUHours: map[string]float64{}}
		f.pts[int64(t)] = p
	}
	return p
}

// fleet fills the fleet's series per interval.
func (b *builder) fleet() error {
	f := b.sums
	for _, step := range []func(*fleetSums) error{b.fleetTokens, b.fleetGPU, b.fleetStates} {
		if err := step(f); err != nil {
			return err
		}
	}
	for k, p := range f.pts {
		tok := f.tokens[k]
		// Over the part of the bucket the range holds: a range's first
		// and last buckets are ragged (a 40-minute edge of an hourly
		// bucket read a third low over the whole hour).
		if secs := b.bucketSeconds(p.Time); secs > 0 {
			p.TPS = tok / secs
		}
		if p.GPUHours > 0 {
			v := tok / p.GPUHours
			p.TokensPerGPUHour = &v
		}
		if f.energy[k] > 0 {
			v := tok / f.energy[k]
			p.TokensPerJoule = &v
		}
		b.r.Fleet = append(b.r.Fleet, *p)
	}
	sort.Slice(b.r.Fleet, func(i, j int) bool { return b.r.Fleet[i].Time.Before(b.r.Fleet[j].Time) })
	return nil
}

// bucketSeconds is how much of the bucket starting at t the range holds.
func (b *builder) bucketSeconds(t time.Time) float64 {
	lo, hi := t, t.Add(b.f.Interval)
	if lo.Before(b.f.From) {
		lo = b.f.From
	}
	if !b.f.To.IsZero() && hi.After(b.f.To) {
		hi = b.f.To
	}
	return hi.Sub(lo).Seconds()
}

// fleetTokens reads the fleet's tokens per interval.
func (b *builder) fleetTokens(f *fleetSums) error {
	return b.trendRows(FleetTokens, func(_ map[string]string, row map[string]any) error {
		v, _ := influxql.Num(row[schema.FieldTokens])
		f.tokens[f.at(row).Time.Unix()] += v
		return nil
	})
}

// fleetGPU reads the fleet's GPU-hours and energy per interval.
func (b *builder) fleetGPU(f *fleetSums) error {
	return b.trendRows(FleetGPU, func(tags map[string]string, row map[string]any) error {
		secs, err := b.seconds(schema.GPU, tags[schema.TagHost], row)
		if err != nil {
			return err
		}
		f.addGPU(secs, row)
		return nil
	})
}

// addGPU counts a row's GPU time (secs) and energy into its interval.
func (f *fleetSums) addGPU(secs float64, row map[string]any) *FleetPoint {
	p := f.at(row)
	p.GPUHours += secs / 3600
	e, _ := influxql.Num(row[schema.FieldEnergyJ])
	f.energy[p.Time.Unix()] += e
	return p
}

// fleetStates reads the GPU-hours of each state per interval: the
// servers' GPUs take their server's state, and GPUs that served none are
// unused.
func (b *builder) fleetStates(f *fleetSums) error {
	err := b.stateRows(b.ownTrendParts(), StateTrend, StateTrendAll, func(st string, tags map[string]string, row map[string]any) error {
		secs, err := b.seconds(schema.Server, tags[schema.TagHost], row)
		if err != nil {
			return err
		}
		f.at(row).StateGPUHours[st] += secs * float64(gpuCount(tags[schema.TagGPUs])) / 3600
		return nil
	})
	if err != nil {
		return err
	}
	return b.trendRows(UnusedTrend, func(tags map[string]string, row map[string]any) error {
		secs, err := b.seconds(schema.GPU, tags[schema.TagHost], row)
		if err != nil {
			return err
		}
		f.at(row).StateGPUHours[Unused] += secs / 3600
		return nil
	})
}

// price turns GPU-hours into cost by each GPU's model.
func (b *builder) price(prices map[string]float64) {
	if len(prices) == 0 {
		return
	}
	r := b.r
	var cost float64
	missing := map[string]bool{}
	for _, g := range r.GPUs {
		p, ok := prices[g.Model]
		if !ok {
			p, ok = prices["*"]
		}
		if !ok {
			missing[g.Model] = true
			continue
		}
		cost += p * g.Hours
	}
	for m := range missing {
		r.Unpriced = append(r.Unpriced, m)
	}
	sort.Strings(r.Unpriced)
	r.Cost = &cost
	if r.Tokens > 0 {
		v := cost / r.Tokens * 1e6
		r.CostPerMillionToken = &v
	}
}

var stateWhy = map[string]string{
	schema.StateDown:          "it could not be read",
	schema.StateSleeping:      "the engine slept, holding its GPUs with nothing running",
	schema.StateIdle:          "no tokens and nothing running",
	schema.StateKVBound:       "requests waited or were preempted with the KV cache full",
	schema.StateQueueBound:    "requests waited while the GPU was mostly idle: the scheduler, CPU or a batch limit held it back",
	schema.StateUnderutilized: "tokens flowed, nothing waited, and the GPU was mostly idle: too little demand for this hardware",
	schema.StateSaturated:     "the GPU was busy and requests still waited: more hardware would serve more",
}

func pct(v float64) int { return int(math.Round(100 * v)) }

// rankKey is v to 10 significant digits, what rankings compare: sums of
// the same windows added in another order (per period, then across
// periods) differ in their last digits, and equal servers must tie, and
// fall to their names, whichever way the sums were taken.
func rankKey(v float64) float64 {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return v
	}
	p := math.Pow(10, 9-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// maxPerKind is how many findings of one kind are spelled out; the rest
// are counted in one more line.
const maxPerKind = 5

func findings(r *Report) []string {
	var out []string
	var idle []GPUReport
	for _, g := range r.GPUs {
		if g.Windows > 0 && g.IdleShare >= 0.5 {
			idle = append(idle, g)
		}
	}
	sort.SliceStable(idle, func(a, b int) bool {
		return rankKey(idle[a].IdleShare*idle[a].Hours) > rankKey(idle[b].IdleShare*idle[b].Hours)
	})
	for i, g := range idle {
		if i == maxPerKind {
			var hours float64
			for _, g := range idle[i:] {
				hours += g.IdleShare * g.Hours
			}
			out = append(out, fmt.Sprintf("%d more GPUs were idle more than half the time: %.1f GPU-hours idle between them", len(idle)-i, hours))
			break
		}
		who := "no server uses it"
		if g.Server != "" {
			who = "it serves " + g.Server
		}
		out = append(out, fmt.Sprintf("gpu %s (%s) on %s was idle %d%% of %.1f h; %s", g.GPU, g.UUID, g.Host, pct(g.IdleShare), g.Hours, who))
	}
	type worst struct {
		s     ServerReport
		state string
		share float64
	}
	var bad []worst
	for _, s := range r.Servers {
		w := worst{s: s}
		for _, st := range States {
			if st != schema.StateOK && s.StateShare[st] > w.share {
				w.state, w.share = st, s.StateShare[st]
			}
		}
		if w.share >= 0.25 {
			bad = append(bad, w)
		}
	}
	sort.SliceStable(bad, func(a, b int) bool {
		return rankKey(bad[a].share*bad[a].s.GPUHours) > rankKey(bad[b].share*bad[b].s.GPUHours)
	})
	for i, w := range bad {
		if i == maxPerKind {
			out = append(out, fmt.Sprintf("%d more servers spent a quarter of the time or more in a state other than ok", len(bad)-i))
			break
		}
		out = append(out, fmt.Sprintf("server %s on %s was %s %d%% of the time: %s", w.s.Server, w.s.Host, w.state, pct(w.share), stateWhy[w.state]))
	}
	out = append(out, suspectFindings(r)...)
	out = append(out, latencyFindings(r)...)
	out = append(out, lostFindings(r)...)
	var ranked []ServerReport
	for _, s := range r.Servers {
		if s.TokensPerGPUHour != nil {
			ranked = append(ranked, s)
		}
	}
	sort.SliceStable(ranked, func(a, b int) bool {
		return rankKey(*ranked[a].TokensPerGPUHour) < rankKey(*ranked[b].TokensPerGPUHour)
	})
	if len(ranked) > 1 {
		lo, hi := ranked[0], ranked[len(ranked)-1]
		out = append(out, fmt.Sprintf("lowest tokens per GPU-hour: %s on %s with %.0f, against %.0f for %s on %s",
			lo.Server, lo.Host, *lo.TokensPerGPUHour, *hi.TokensPerGPUHour, hi.Server, hi.Host))
	}
	if len(out) == 0 {
		out = append(out, "no waste found in this range")
	}
	return out
}

// suspectFindings says, per server whose windows a sanity rule doubted,
// how many and by which rules.
func suspectFindings(r *Report) []string {
	var out []string
	for _, s := range r.Servers {
		if len(s.Suspect) == 0 {
			continue
		}
		rules := make([]string, 0, len(s.Suspect))
		for rule := range s.Suspect {
			rules = append(rules, rule)
		}
		sort.Strings(rules)
		parts := make([]string, len(rules))
		for i, rule := range rules {
			parts[i] = fmt.Sprintf("%s %d", rule, s.Suspect[rule])
		}
		out = append(out, fmt.Sprintf("server %s on %s had windows a sanity rule doubts (%s): a sensor or counter behind them may lie; their values are as read",
			s.Server, s.Host, strings.Join(parts, ", ")))
	}
	return out
}

// WindowLengths reads each host's window length from the data of
// measurement m in the time filter tf: the smallest spacing of consecutive
// windows of one series (windows are aligned, so every spacing is a
// multiple of it). Hosts with no two windows in one series are absent.
func WindowLengths(ctx context.Context, q querier, m, tf string) (map[string]time.Duration, error) {
	s, err := q.Query(ctx, `SELECT min("d") AS "d" FROM (SELECT elapsed(`+id(schema.FieldCoverage)+`, 1ms) AS "d" FROM `+id(m)+
		` WHERE `+tf+` GROUP BY *) GROUP BY `+id(schema.TagHost))
	if err != nil {
		return nil, fmt.Errorf("window length of %s: %w", m, err)
	}
	out := map[string]time.Duration{}
	for _, x := range s {
		for _, row := range x.Rows() {
			if v, ok := influxql.Num(row["d"]); ok && v > 0 {
				out[x.Tags[schema.TagHost]] = time.Duration(v) * time.Millisecond
			}
		}
	}
	return out, nil
}
