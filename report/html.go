package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"sync"
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

// page is parsed on first use: the daemon links this package (its
// commands share one binary) and would otherwise keep the parsed template
// on its heap for nothing.
var page = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"pct": func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) },
		"f1":  func(v float64) string { return fmt.Sprintf("%.1f", v) },
		"num": short,
		"opt": func(v *float64) string {
			if v == nil {
				return "–"
			}
			return short(*v)
		},
		"money": money,
		"deref": func(v *float64) float64 { return *v },
		"color": func(s string) string { return stateColor[s] },
		"share": func(m map[string]float64, st string) string {
			if m[st] == 0 {
				return ""
			}
			return fmt.Sprintf("%.0f%%", 100*m[st])
		},
	}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tpsmon report {{.From.Format "2006-01-02 15:04"}} – {{.To.Format "2006-01-02 15:04"}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fff;max-width:1120px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #dde}h3{font-size:15px;margin:16px 0 4px}
.sub{color:#5a6275}ul.f li{margin:4px 0}table{border-collapse:collapse;margin:6px 0}
td:first-child{white-space:nowrap}td,th{padding:3px 10px;border-bottom:1px solid #eef;text-align:left}th{background:#f4f5fa}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.chart{width:520px;height:190px;margin:4px 8px 4px 0;background:#fafbfe;border:1px solid #e4e6ef}
.t{font-size:12px;fill:#1d2330;font-weight:600}.l{font-size:9.5px;fill:#5a6275}.u{font-size:9.5px;fill:#1d2330}.n{font-size:12px;fill:#99a}
.a{stroke:#99a;stroke-width:1}.g{stroke:#e6e8f0;stroke-width:1}
.kpi{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}.kpi div{background:#f4f5fa;border-radius:6px;padding:8px 12px;min-width:120px}
.kpi b{display:block;font-size:19px}.kpi span{color:#5a6275;font-size:12px}.sw{display:inline-block;width:10px;height:10px;margin-right:5px;border-radius:2px}
.more{color:#5a6275;font-size:12px}
</style></head><body>
<h1>Is this hardware turning into tokens?</h1>
<div class="sub">{{.From.Format "2006-01-02 15:04 MST"}} – {{.To.Format "2006-01-02 15:04 MST"}}{{if .Host}} · host {{.Host}}{{end}}{{if .Server}} · server {{.Server}}{{end}} · {{if eq .Level "raw"}}raw windows{{if .Window}} of {{.Window}}{{end}}{{else}}{{.Level}} rollups{{end}} · {{.Interval}} buckets</div>
<div class="kpi">
<div><b>{{num .GPUHours}}</b><span>GPU-hours observed</span></div>
<div><b>{{num .Tokens}}</b><span>tokens generated</span></div>
<div><b>{{opt .TokensPerGPUHour}}</b><span>tokens per GPU-hour</span></div>
<div><b>{{opt .TokensPerJoule}}</b><span>tokens per joule</span></div>
{{if .Cost}}<div><b>{{money .Cost}}</b><span>cost of the GPU-hours</span></div>
<div><b>{{money .CostPerMillionToken}}</b><span>cost per million tokens</span></div>{{end}}
</div>
{{if .LatencyNote}}<p class="more">{{.LatencyNote}}.</p>{{end}}
{{if .Unpriced}}<p class="more">No price for GPU model(s): {{range $i, $m := .Unpriced}}{{if $i}}, {{end}}{{if $m}}{{$m}}{{else}}(unnamed){{end}}{{end}} — not in the cost.</p>{{end}}
<h2>Findings</h2><ul class="f">{{range .Findings}}<li>{{.}}</li>{{end}}</ul>
<h2>GPU-hours by state</h2>
<table><tr><th>state</th><th class="n">GPU-hours</th><th class="n">share</th><th>most of it</th></tr>
{{range .Waste}}<tr><td><span class="sw" style="background:{{color .State}}"></span>{{.State}}</td><td class="n">{{f1 .GPUHours}}</td><td class="n">{{pct .Share}}</td><td>{{range $i, $b := .By}}{{if lt $i 4}}{{if $i}}, {{end}}{{if $b.Server}}{{$b.Server}} on {{$b.Host}}{{else}}gpu {{$b.GPU}} ({{$b.UUID}}) on {{$b.Host}}{{end}}: {{f1 $b.GPUHours}} h{{end}}{{end}}{{if gt (len .By) 4}} … {{len .By}} in all{{end}}</td></tr>{{end}}
</table>
<h2>Fleet</h2>
{{range .Fleet}}{{.}}{{end}}
<h2>Servers, lowest tokens per GPU-hour first</h2>
<table><tr><th>host</th><th>server</th><th>GPUs</th><th class="n">tokens</th><th class="n">GPU-hours</th><th class="n">tokens / GPU-hour</th><th class="n">tokens / joule</th>{{range .States}}{{if ne . "unused"}}<th class="n">{{.}}</th>{{end}}{{end}}</tr>
{{range .WorstServers}}{{$s := .}}<tr><td>{{.Host}}</td><td>{{.Server}}</td><td>{{.GPUs}}</td><td class="n">{{num .Tokens}}</td><td class="n">{{f1 .GPUHours}}</td><td class="n">{{opt .TokensPerGPUHour}}</td><td class="n">{{opt .TokensPerJoule}}</td>{{range $.States}}{{if ne . "unused"}}<td class="n">{{share $s.StateShare .}}</td>{{end}}{{end}}</tr>{{end}}
</table>{{if .MoreServers}}<p class="more">{{.MoreServers}} more servers in --format json.</p>{{end}}
{{if .LostGPUHours}}<h2>Servers by throughput lost below the decode ceiling, most GPU-hours first</h2>
<p class="more">Per window, the system tokens/s the GPUs could give at its running requests (the ceiling) less what it gave, never below zero; over the windows that carry a ceiling. GPU-hours: the share of the GPUs' time the same tokens would not have needed.{{if .WindowsWithoutCeiling}} {{.WindowsWithoutCeiling}} windows had no ceiling.{{end}}</p>
<table><tr><th>host</th><th>server</th><th>GPUs</th><th class="n">lost GPU-hours</th><th class="n">lost tokens</th><th class="n">of the ceiling</th><th class="n">mean MBU</th><th class="n">above ceiling</th><th class="n">windows with a ceiling</th><th class="n">without</th></tr>
{{range .LostRows}}<tr><td>{{.Host}}</td><td>{{.Server}}</td><td>{{.GPUs}}</td><td class="n">{{if .LostGPUHours}}{{f1 (deref .LostGPUHours)}}{{else}}–{{end}}</td><td class="n">{{opt .LostTokens}}</td><td class="n">{{if .LostShare}}{{pct (deref .LostShare)}}{{else}}–{{end}}</td><td class="n">{{if .MBU}}{{pct (deref .MBU)}}{{else}}–{{end}}</td><td class="n">{{num .AboveCeilingTokens}}</td><td class="n">{{.CeilingWindows}}</td><td class="n">{{.WindowsWithoutCeiling}}</td></tr>{{end}}
</table>{{if .MoreLost}}<p class="more">{{.MoreLost}} more servers in --format json.</p>{{end}}{{end}}
<h2>GPUs, most idle GPU-hours first</h2>
<table><tr><th>host</th><th>gpu</th><th>UUID</th><th>model</th><th>server</th><th class="n">hours</th><th class="n">idle (util &lt; 5%)</th><th class="n">mean util</th><th class="n">energy</th></tr>
{{range .WorstGPUs}}<tr><td>{{.Host}}</td><td>{{.GPU}}</td><td>{{.UUID}}</td><td>{{.Model}}</td><td>{{if .Server}}{{.Server}}{{else}}<em>none</em>{{end}}</td><td class="n">{{f1 .Hours}}</td><td class="n">{{pct .IdleShare}}</td><td class="n">{{f1 .MeanUtil}} %</td><td class="n">{{num .EnergyJ}}J</td></tr>{{end}}
</table>{{if .MoreGPUs}}<p class="more">{{.MoreGPUs}} more GPUs in --format json.</p>{{end}}
{{range .ServerCharts}}<h3>{{.Title}}</h3>{{range .Charts}}{{.}}{{end}}{{with .Latency}}
<p class="more">{{.Note}}</p>
{{if .Attainment}}<p>SLO attainment over the range: {{.Attainment}}.</p>{{end}}
{{if .Missed}}<table><tr><th>window under the SLO floor</th><th>time went to</th><th class="n">attainment</th><th class="n">requests</th><th class="n">TTFT p90</th><th class="n">ITL p90</th><th class="n">queue p99</th></tr>
{{range .Missed}}<tr><td>{{.Time}}</td><td>{{.Phase}}</td><td class="n">{{.Attainment}}</td><td class="n">{{.Requests}}</td><td class="n">{{.TTFT}}</td><td class="n">{{.ITL}}</td><td class="n">{{.Queue}}</td></tr>{{end}}
</table>{{if .Omitted}}<p class="more">{{.Omitted}} more windows under the floor, not listed: the latest {{len .Missed}} are.</p>{{end}}{{end}}{{end}}{{end}}
{{if .MoreCharts}}<p class="more">Charts for {{.MoreCharts}} more servers: use --server or --format json.</p>{{end}}
</body></html>
`))
})

// WriteHTML writes the report as one self-contained page: no script, no
// network resource, charts as inline SVG.
func WriteHTML(w io.Writer, r *Report) error {
	v, err := newView(r)
	if err != nil {
		return err
	}
	return page().Execute(w, v)
}
