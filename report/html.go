package report

import (
	"context"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/schema"
)

// stateColor gives each state one colour across the report.
var stateColor = map[string]string{
	schema.StateDown: "#6b7280", schema.StateIdle: "#f2b134", schema.StateKVBound: "#d6452f", schema.StateQueueBound: "#e07b39",
	schema.StateUnderutilized: "#8fb3de", schema.StateSaturated: "#7a4fd6", schema.StateOK: "#2f9d6a", schema.StateSleeping: "#9ca3af", Unused: "#c4c4c4",
}

// Shown at most: the rest is in --format json.
const (
	maxServerCharts = 8
	maxRows         = 25
)

// view is what the page shows, worked out from a Report.
type view struct {
	*Report
	Fleet          []template.HTML
	States         []string // those that occurred, for the columns
	WorstServers   []ServerReport
	MoreServers    int
	WorstGPUs      []GPUReport
	MoreGPUs       int
	ServerCharts   []serverCharts
	MoreCharts     int
	UnpricedModels string
	LostRows       []Lost
	MoreLost       int
}

type serverCharts struct {
	Title   string
	Charts  []template.HTML
	Latency *latencyView
}

func newView(r *Report) (*view, error) {
	v := &view{Report: r}
	step, err := time.ParseDuration(r.Interval)
	if err != nil || step <= 0 {
		return nil, fmt.Errorf("report: interval %q: %v", r.Interval, err)
	}
	g := timeGrid{step: step}
	for t := r.From.Truncate(step); t.Before(r.To); t = t.Add(step) {
		g.ts = append(g.ts, t)
	}
	occurred := map[string]bool{}
	for _, s := range r.Waste {
		occurred[s.State] = true
	}
	for _, st := range append(append([]string{}, States...), Unused) {
		if occurred[st] {
			v.States = append(v.States, st)
		}
	}
	v.Fleet = fleetCharts(r.Fleet, v.States, g)

	// Worst servers: lowest tokens per GPU-hour first; servers without a
	// rate (no GPUs or no tokens) last.
	servers := append([]ServerReport{}, r.Servers...)
	rate := func(s ServerReport) float64 {
		if s.TokensPerGPUHour == nil {
			return math.Inf(1)
		}
		return *s.TokensPerGPUHour
	}
	sort.SliceStable(servers, func(i, j int) bool { return rankKey(rate(servers[i])) < rankKey(rate(servers[j])) })
	v.WorstServers, v.MoreServers = headOf(servers, maxRows)

	// Worst GPUs: most GPU-hours idle (under 5 %).
	gpus := append([]GPUReport{}, r.GPUs...)
	sort.SliceStable(gpus, func(i, j int) bool {
		return rankKey(gpus[i].IdleShare*gpus[i].Hours) > rankKey(gpus[j].IdleShare*gpus[j].Hours)
	})
	v.WorstGPUs, v.MoreGPUs = headOf(gpus, maxRows)
	v.LostRows, v.MoreLost = headOf(r.Lost, maxRows)

	for i, s := range servers {
		if i == maxServerCharts {
			v.MoreCharts = len(servers) - i
			break
		}
		v.ServerCharts = append(v.ServerCharts, serverChartsOf(s, g))
	}
	return v, nil
}

// timeGrid is the report's buckets, step apart.
type timeGrid struct {
	ts   []time.Time
	step time.Duration
}

// idx is t's bucket; out of range when t is outside the grid.
func (g timeGrid) idx(t time.Time) (int, bool) {
	i := int(t.Sub(g.ts[0]) / g.step)
	return i, i >= 0 && i < len(g.ts)
}

// nan is a series with no value in any bucket.
func (g timeGrid) nan() []float64 {
	s := make([]float64, len(g.ts))
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

func (g timeGrid) chart(title, unit string, lines ...line) timeChart {
	return timeChart{title: title, unit: unit, ts: g.ts, step: g.step, lines: lines}
}

// fleetCharts are the fleet's rate, efficiency and per-state charts.
func fleetCharts(fleet []FleetPoint, states []string, g timeGrid) []template.HTML {
	tps, perHour, perJ := g.nan(), g.nan(), g.nan()
	byState := map[string][]float64{}
	for _, st := range states {
		byState[st] = g.nan()
	}
	for _, p := range fleet {
		i, ok := g.idx(p.Time)
		if !ok {
			continue
		}
		tps[i] = p.TPS
		if p.TokensPerGPUHour != nil {
			perHour[i] = *p.TokensPerGPUHour
		}
		if p.TokensPerJoule != nil {
			perJ[i] = *p.TokensPerJoule
		}
		for st, h := range p.StateGPUHours {
			if byState[st] != nil {
				byState[st][i] = h
			}
		}
	}
	var stacks []line
	for _, st := range states {
		stacks = append(stacks, line{name: st, color: stateColor[st], ys: byState[st]})
	}
	stacked := g.chart("GPU-hours per state, per bucket", "GPU-hours", stacks...)
	stacked.stacked = true
	return []template.HTML{
		g.chart("Fleet tokens per second (all servers)", "tokens/s", line{"tokens/s", "#2f6fd6", tps}).svg(),
		g.chart("Tokens per GPU-hour (all GPUs, used or not)", "tokens/GPU-h", line{"tokens/GPU-hour", "#2f9d6a", perHour}).svg(),
		g.chart("Tokens per joule (all GPUs' energy)", "tokens/J", line{"tokens/J", "#b03a48", perJ}).svg(),
		stacked.svg(),
	}
}

// serverChartsOf are one server's rate, concurrency and utilization charts.
func serverChartsOf(s ServerReport, g timeGrid) serverCharts {
	cols := map[string][]float64{"sys": g.nan(), "user": g.nan(), "run": g.nan(), "util": g.nan()}
	for _, p := range s.Series {
		k, ok := g.idx(p.Time)
		if !ok {
			continue
		}
		for c, val := range map[string]float64{"sys": p.SystemTPS, "user": p.PerUserTPS, "run": p.Running, "util": p.GPUUtil} {
			if val >= 0 {
				cols[c][k] = val
			}
		}
	}
	sc := serverCharts{
		Title: fmt.Sprintf("%s on %s (GPUs %s)", s.Server, s.Host, s.GPUs),
		Charts: append([]template.HTML{
			g.chart("System tokens/s (all requests)", "tokens/s", line{"system", "#2f6fd6", cols["sys"]}).svg(),
			g.chart("Per-user tokens/s (one stream)", "tokens/s", line{"per user", "#d6762f", cols["user"]}).svg(),
			g.chart("Running requests (concurrency)", "requests", line{"running", "#2f9d6a", cols["run"]}).svg(),
			g.chart("GPU utilization", "%", line{"util", "#b03a48", cols["util"]}).svg(),
			scatter(s.Series),
		}, curveCharts(s)...),
	}
	if s.Latency != nil {
		sc.Charts = append(sc.Charts, latencyCharts(s.Latency, g)...)
		sc.Latency = newLatencyView(s.Latency)
	}
	return sc
}

// money writes an amount with thousands separators and cents.
func money(v *float64) string {
	if v == nil {
		return "–"
	}
	s := fmt.Sprintf("%.2f", math.Abs(*v))
	whole, cents := s[:len(s)-3], s[len(s)-3:]
	var b []byte
	for i := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, whole[i])
	}
	if *v < 0 {
		return "-" + string(b) + cents
	}
	return string(b) + cents
}

func headOf[T any](s []T, n int) ([]T, int) {
	if len(s) <= n {
		return s, 0
	}
	return s[:n], len(s) - n
}

// The page's numbers (page.templ).
func percent(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }
func f1(v float64) string      { return fmt.Sprintf("%.1f", v) }

// optShort, optF1 and optPct write an absent number as a dash.
func optShort(v *float64) string { return optOf(v, short) }
func optF1(v *float64) string    { return optOf(v, f1) }
func optPct(v *float64) string   { return optOf(v, percent) }

func optOf(v *float64, f func(float64) string) string {
	if v == nil {
		return "–"
	}
	return f(*v)
}

// stateShare is a server's share of its time in state st, blank for none.
func stateShare(m map[string]float64, st string) string {
	if m[st] == 0 {
		return ""
	}
	return percent(m[st])
}

// subtitle says the range, its filters and what it was read from.
func (v *view) subtitle() string {
	s := v.From.Format("2006-01-02 15:04 MST") + " – " + v.To.Format("2006-01-02 15:04 MST")
	if v.Host != "" {
		s += " · host " + v.Host
	}
	if v.Server != "" {
		s += " · server " + v.Server
	}
	if v.Level == Raw {
		s += " · raw windows"
		if v.Window != "" {
			s += " of " + v.Window
		}
	} else {
		s += " · " + v.Level + " rollups"
	}
	return s + " · " + v.Interval + " buckets"
}

// unpricedList names the GPU models without a price.
func (v *view) unpricedList() string {
	names := make([]string, len(v.Unpriced))
	for i, m := range v.Unpriced {
		names[i] = m
		if m == "" {
			names[i] = "(unnamed)"
		}
	}
	return strings.Join(names, ", ")
}

// mostOf names the four that spent most of a state's GPU-hours.
func mostOf(w StateHours) string {
	var parts []string
	for i, b := range w.By {
		if i == 4 {
			break
		}
		who := fmt.Sprintf("gpu %s (%s) on %s", b.GPU, b.UUID, b.Host)
		if b.Server != "" {
			who = b.Server + " on " + b.Host
		}
		parts = append(parts, fmt.Sprintf("%s: %s h", who, f1(b.GPUHours)))
	}
	s := strings.Join(parts, ", ")
	if len(w.By) > 4 {
		s += fmt.Sprintf(" … %d in all", len(w.By))
	}
	return s
}

// WriteHTML writes the report as one self-contained page: no script, no
// network resource, charts as inline SVG.
func WriteHTML(w io.Writer, r *Report) error {
	v, err := newView(r)
	if err != nil {
		return err
	}
	return pageHTML(v).Render(context.Background(), w)
}
