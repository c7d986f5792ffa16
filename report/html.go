package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
)

// chart dimensions, in SVG units.
const (
	chartW, chartH = 460.0, 150.0
	padL, padB     = 48.0, 22.0
)

// series picks one column of a server's points.
var series = map[string]func(Point) float64{
	"sys":  func(p Point) float64 { return p.SystemTPS },
	"user": func(p Point) float64 { return p.PerUserTPS },
	"run":  func(p Point) float64 { return p.Running },
	"util": func(p Point) float64 { return p.GPUUtil },
}

// lineChart draws one series of a server over time as inline SVG.
func lineChart(title, color string, pts []Point, column string) template.HTML {
	get := series[column]
	var xs, ys []float64
	for _, p := range pts {
		if v := get(p); v >= 0 {
			xs = append(xs, float64(p.Time.Unix()))
			ys = append(ys, v)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="14" class="t">%s</text>`, padL, template.HTMLEscapeString(title))
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="n">no data</text></svg>`, padL, chartH/2)
		return template.HTML(b.String())
	}
	x0, x1 := minmax(xs)
	_, y1 := minmax(ys)
	if y1 <= 0 {
		y1 = 1
	}
	if x1 == x0 {
		x1 = x0 + 1
	}
	sx := func(x float64) float64 { return padL + (x-x0)/(x1-x0)*(chartW-padL-8) }
	sy := func(y float64) float64 { return chartH - padB - y/y1*(chartH-padB-22) }
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" class="a"/>`, padL, chartH-padB, chartW-8, chartH-padB)
	fmt.Fprintf(&b, `<text x="4" y="%.1f" class="l">%s</text><text x="4" y="%.1f" class="l">0</text>`, sy(y1)+4, short(y1), chartH-padB)
	var path strings.Builder
	for i := range xs {
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, sx(xs[i]), sy(ys[i]))
	}
	fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, strings.TrimSpace(path.String()), color)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="l">%s</text><text x="%.0f" y="%.0f" class="l" text-anchor="end">%s</text>`,
		padL, chartH-6, pts[0].Time.Format("01-02 15:04"), chartW-8, chartH-6, pts[len(pts)-1].Time.Format("01-02 15:04"))
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// scatter draws GPU utilization against system TPS, one dot per interval.
func scatter(pts []Point) template.HTML {
	var xs, ys []float64
	for _, p := range pts {
		if p.GPUUtil >= 0 && p.SystemTPS >= 0 {
			xs, ys = append(xs, p.GPUUtil), append(ys, p.SystemTPS)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="GPU utilization vs system TPS">`, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%.0f" y="14" class="t">GPU utilization (x, 0-100%%) vs system tokens/s (y)</text>`, padL)
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="n">no data</text></svg>`, padL, chartH/2)
		return template.HTML(b.String())
	}
	_, y1 := minmax(ys)
	if y1 <= 0 {
		y1 = 1
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" class="a"/>`, padL, chartH-padB, chartW-8, chartH-padB)
	fmt.Fprintf(&b, `<text x="4" y="30" class="l">%s</text>`, short(y1))
	for i := range xs {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.2" fill="#7a4fd6" fill-opacity="0.6"/>`,
			padL+xs[i]/100*(chartW-padL-8), chartH-padB-ys[i]/y1*(chartH-padB-22))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func minmax(v []float64) (float64, float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"line":    lineChart,
	"scatter": scatter,
	"pct":     func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) },
	"f1":      func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"opt": func(v *float64, prec int) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.*f", prec, *v)
	},
	"sys":    func(p Point) float64 { return p.SystemTPS },
	"user":   func(p Point) float64 { return p.PerUserTPS },
	"run":    func(p Point) float64 { return p.Running },
	"util":   func(p Point) float64 { return p.GPUUtil },
	"states": func() []string { return States },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tpsmon report {{.From.Format "2006-01-02 15:04"}} – {{.To.Format "2006-01-02 15:04"}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde}
.sub{color:#5a6275}ul.f li{margin:4px 0}table{border-collapse:collapse;margin:6px 0}
td,th{padding:3px 10px;border-bottom:1px solid #eef;text-align:left}th{background:#f4f5fa}
.chart{width:460px;height:150px;margin:4px 8px 4px 0;background:#fafbfe;border:1px solid #e4e6ef}
.t{font-size:11px;fill:#1d2330}.l{font-size:9px;fill:#5a6275}.n{font-size:11px;fill:#99a}.a{stroke:#bbc;stroke-width:1}
.srv{margin:18px 0}
</style></head><body>
<h1>Is this hardware turning into tokens?</h1>
<div class="sub">{{.From.Format "2006-01-02 15:04 MST"}} – {{.To.Format "2006-01-02 15:04 MST"}}{{if .Host}} · host {{.Host}}{{end}}{{if .Server}} · server {{.Server}}{{end}}{{if .Window}} · windows of {{.Window}}{{end}} · {{.Level}} series, {{.Interval}} buckets</div>
<h2>Findings</h2><ul class="f">{{range .Findings}}<li>{{.}}</li>{{end}}</ul>
<h2>GPU-hours by state</h2>
<table><tr><th>state</th><th>GPU-hours</th><th>servers responsible</th></tr>
{{range .Waste}}<tr><td>{{.State}}</td><td>{{f1 .GPUHours}}</td><td>{{range $i, $b := .By}}{{if $i}}, {{end}}{{if $b.Server}}{{$b.Server}} on {{$b.Host}}{{else}}gpu {{$b.GPU}} ({{$b.UUID}}) on {{$b.Host}}{{end}}: {{f1 $b.GPUHours}} h{{end}}</td></tr>{{end}}
</table>
<h2>Servers</h2>
<table><tr><th>host</th><th>server</th><th>tokens</th><th>tokens / GPU-hour</th><th>tokens / joule</th>{{range states}}<th>{{.}}</th>{{end}}</tr>
{{range .Servers}}{{$s := .}}<tr><td>{{.Host}}</td><td>{{.Server}}</td><td>{{printf "%.0f" .Tokens}}</td><td>{{opt .TokensPerGPUHour 0}}</td><td>{{opt .TokensPerJoule 3}}</td>{{range states}}<td>{{pct (index $s.StateShare .)}}</td>{{end}}</tr>{{end}}
</table>
{{range .Servers}}<div class="srv"><h2>{{.Server}} on {{.Host}}</h2>
{{line "system tokens/s (all requests)" "#2f6fd6" .Series "sys"}}{{line "per-user tokens/s (one stream)" "#d6762f" .Series "user"}}
{{line "running requests (concurrency)" "#2f9d6a" .Series "run"}}{{line "GPU utilization %" "#b03a48" .Series "util"}}
{{scatter .Series}}</div>{{end}}
<h2>GPUs</h2>
<table><tr><th>host</th><th>gpu</th><th>server</th><th>idle (util &lt; 5%)</th><th>mean util %</th><th>windows</th></tr>
{{range .GPUs}}<tr><td>{{.Host}}</td><td>{{.GPU}}</td><td>{{if .Server}}{{.Server}}{{else}}<em>none</em>{{end}}</td><td>{{pct .IdleShare}}</td><td>{{f1 .MeanUtil}}</td><td>{{.Windows}}</td></tr>{{end}}
</table>
</body></html>
`))

// WriteHTML writes the report as one self-contained page: no script, no
// network resource, charts as inline SVG.
func WriteHTML(w io.Writer, r *Report) error {
	return page.Execute(w, r)
}
