package report

import (
	"fmt"
	"html/template"
	"math"
	"strings"

	"github.com/tpsmon/tpsmon/analysis/curve"
)

// maxCurveCharts is how many of a server's curves are drawn; the rest are
// in --format json.
const maxCurveCharts = 3

// curveCharts draw a server's operating curves, most windows first.
func curveCharts(s ServerReport) []template.HTML {
	cs := append([]curve.Curve{}, s.OperatingCurve...)
	for i := 1; i < len(cs); i++ { // insertion sort, stable: few curves
		for j := i; j > 0 && cs[j].Windows > cs[j-1].Windows; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	var out []template.HTML
	for i, c := range cs {
		if i == maxCurveCharts {
			break
		}
		out = append(out, curveChart(c))
	}
	return out
}

// runColor shades concurrency bins from light (1 running) to dark.
func runColor(i, n int) string {
	f := 0.0
	if n > 1 {
		f = float64(i) / float64(n-1)
	}
	r, g, b := 120-f*90, 180-f*140, 240-f*60
	return fmt.Sprintf("#%02x%02x%02x", int(r), int(g), int(b))
}

// exactnessNote says, after the chart's title, how the quantiles were
// read when not from every window.
func exactnessNote(e string) string {
	switch e {
	case curve.SketchExactness:
		return " · quantiles ±0.5 % (rollups)"
	case curve.RollupExactness:
		return " · quantiles: rollup periods' means"
	}
	return ""
}

// curveChart draws system TPS (y) against per-user TPS (x): a dot per
// concurrency bin at its medians, p10-p90 whiskers, a hollow diamond at
// its means (curve.MeansDefinition), the frontier, the per-user floor as
// a vertical line and the operating point ringed.
func curveChart(c curve.Curve) template.HTML {
	var b strings.Builder
	what := string(c.Kind)
	if c.Model != "" {
		what += ", " + c.Model
	}
	if c.Version != "" {
		what += ", " + c.Engine + " " + c.Version
	}
	if c.GPUs != "" {
		what += ", GPUs " + c.GPUs
	}
	title := "Operating curve (" + what + ")" + exactnessNote(c.Exactness)
	fmt.Fprintf(&b, `<svg class="chart curve" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(&b, `<text x="%.0f" y="15" class="t">%s</text>`, padL, template.HTMLEscapeString(title))
	type pt struct {
		label              string
		x, y               float64
		x10, x90, y10, y90 float64
		mx, my             *float64 // the means
	}
	var pts []pt
	xhi, yhi := 0.0, 0.0
	for _, bn := range c.Bins {
		if bn.SystemTPS == nil || bn.PerUserTPS == nil {
			continue
		}
		p := pt{bn.Running, bn.PerUserTPS.P50, bn.SystemTPS.P50, bn.PerUserTPS.P10, bn.PerUserTPS.P90, bn.SystemTPS.P10, bn.SystemTPS.P90,
			bn.PerUserTPS.Mean, bn.SystemTPS.Mean}
		pts = append(pts, p)
		xhi, yhi = math.Max(xhi, p.x90), math.Max(yhi, p.y90)
		if p.mx != nil && p.my != nil {
			xhi, yhi = math.Max(xhi, *p.mx), math.Max(yhi, *p.my)
		}
	}
	for _, f := range c.Frontier {
		xhi, yhi = math.Max(xhi, f.PerUserTPS), math.Max(yhi, f.SystemTPS)
	}
	op := c.Operating
	if op != nil {
		xhi = math.Max(xhi, op.Floor)
	}
	if len(pts) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="n">no window with both rates in this range</text></svg>`, padL, chartH/2)
		return template.HTML(b.String())
	}
	xt, yt := niceTicks(xhi, 5), niceTicks(yhi, 4)
	xtop, ytop := xt[len(xt)-1], yt[len(yt)-1]
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	sx := func(v float64) float64 { return padL + v/xtop*plotW }
	sy := func(v float64) float64 { return padT + plotH - v/ytop*plotH }
	for _, v := range yt {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" class="g"/><text x="%.0f" y="%.1f" class="l" text-anchor="end">%s</text>`,
			padL, sy(v), chartW-padR, sy(v), padL-4, sy(v)+3, short(v))
	}
	for _, v := range xt {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" class="l" text-anchor="middle">%s</text>`, sx(v), padT+plotH+13, short(v))
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" class="a"/>`, padL, padT+plotH, chartW-padR, padT+plotH)
	fmt.Fprintf(&b, `<text x="4" y="%.0f" class="u" transform="rotate(-90 10 %.0f)">system tok/s</text>`, padT+plotH/2+30, padT+plotH/2)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="l" text-anchor="end">per-user tok/s · dots: median per concurrency bin (label: running), bars p10–p90, ◇ means</text>`, chartW-padR, chartH-3)
	// The frontier: best system TPS at each per-user TPS, as steps.
	if len(c.Frontier) > 0 {
		var path strings.Builder
		for i, f := range c.Frontier {
			if i == 0 {
				fmt.Fprintf(&path, "M%.1f %.1f", sx(f.PerUserTPS), sy(f.SystemTPS))
				continue
			}
			fmt.Fprintf(&path, " H%.1f V%.1f", sx(f.PerUserTPS), sy(f.SystemTPS))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#9aa3b8" stroke-width="1.2" stroke-dasharray="3 2"><title>frontier: best system tok/s at each per-user tok/s</title></path>`, path.String())
	}
	if op != nil {
		x := sx(op.Floor)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#d6452f" stroke-width="1.4" stroke-dasharray="5 3"/>`, x, padT, x, padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" class="l" fill="#d6452f">floor %s tok/s</text>`, x+3, padT+plotH-4, short(op.Floor))
	}
	for i, p := range pts {
		col := runColor(i, len(pts))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, sx(p.x10), sy(p.y), sx(p.x90), sy(p.y), col)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, sx(p.x), sy(p.y10), sx(p.x), sy(p.y90), col)
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s running: %s tok/s system, %s tok/s per user (medians)</title></circle>`,
			sx(p.x), sy(p.y), col, p.label, short(p.y), short(p.x))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="l">%s</text>`, sx(p.x)+5, sy(p.y)-5, p.label)
		if p.mx != nil && p.my != nil {
			x, y := sx(*p.mx), sy(*p.my)
			fmt.Fprintf(&b, `<path d="M%.1f %.1fl4 4l-4 4l-4 -4z" fill="none" stroke="%s" stroke-width="1.2"><title>%s running: %s tok/s system per observed second, %s tok/s per user per stream-second (means)</title></path>`,
				x, y-4, col, p.label, short(*p.my), short(*p.mx))
		}
		if op != nil && op.Met && op.Running == p.label {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="8" fill="none" stroke="#d6452f" stroke-width="2"/>`, sx(p.x), sy(p.y))
		}
	}
	if op != nil {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="l" fill="#d6452f">%s</text>`, padL, padT+4, template.HTMLEscapeString(curve.Line(op)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
