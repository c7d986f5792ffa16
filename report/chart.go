package report

import (
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"
	"time"
)

// chart dimensions, in SVG units.
const (
	chartW, chartH = 520.0, 190.0
	padL, padR     = 58.0, 10.0
	padT, padB     = 24.0, 34.0
)

// line is one series of a chart; NaN is a gap.
type line struct {
	name, color string
	ys          []float64
}

// band is a range drawn shaded under the lines: lo to hi per bucket; a
// bucket where either is NaN breaks it.
type band struct {
	name, color string
	lo, hi      []float64
}

// timeChart draws lines, or stacked bars when stacked, over the shared
// times ts, with ticks and units on both axes.
type timeChart struct {
	title, unit string
	ts          []time.Time
	step        time.Duration
	lines       []line
	bands       []band
	stacked     bool
}

// niceTicks returns about n round tick values covering [0, hi].
func niceTicks(hi float64, n int) []float64 {
	if hi <= 0 || math.IsNaN(hi) || math.IsInf(hi, 0) {
		hi = 1
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := 0.0; v < hi+step*0.999; v += step {
		out = append(out, v)
	}
	return out
}

// short writes a number with an SI suffix.
func short(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e3:
		return trim(v/1e3) + "k"
	case a == 0:
		return "0"
	case a < 0.01:
		return fmt.Sprintf("%.2g", v)
	}
	return trim(v)
}

func trim(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// timeLayout labels ticks by what changes over the span.
func timeLayout(span time.Duration) string {
	switch {
	case span <= 2*time.Hour:
		return "15:04:05"
	case span <= 48*time.Hour:
		return "Jan 2 15:04"
	}
	return "Jan 2"
}

var tickSteps = []time.Duration{
	10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute,
	15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour, 30 * 24 * time.Hour,
}

func (c timeChart) svg() template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, chartW, chartH, template.HTMLEscapeString(c.title))
	fmt.Fprintf(&b, `<text x="%.0f" y="15" class="t">%s</text>`, padL, template.HTMLEscapeString(c.title))
	if len(c.ts) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="n">no data in this range</text></svg>`, padL, chartH/2)
		return template.HTML(b.String())
	}
	x0 := c.ts[0]
	x1 := c.ts[len(c.ts)-1].Add(c.step)
	span := x1.Sub(x0)
	if span <= 0 {
		span = time.Second
	}
	ticks := niceTicks(c.highest(), 4)
	p := plotArea{x0: x0, span: span, w: chartW - padL - padR, h: chartH - padT - padB, top: ticks[len(ticks)-1]}
	// Y axis: gridlines, values, unit.
	for _, v := range ticks {
		y := p.sy(v)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" class="g"/>`, padL, y, chartW-padR, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" class="l" text-anchor="end">%s</text>`, padL-4, y+3, short(v))
	}
	fmt.Fprintf(&b, `<text x="4" y="%.0f" class="u" transform="rotate(-90 10 %.0f)">%s</text>`, padT+p.h/2+30, padT+p.h/2, template.HTMLEscapeString(c.unit))
	layout := c.xAxis(&b, p, x1)
	c.shade(&b, p)
	if c.stacked {
		c.bars(&b, p, layout)
	} else {
		c.paths(&b, p)
	}
	// Legend when there is more than one series.
	if len(c.lines)+len(c.bands) > 1 {
		x := padL
		key := func(name, color, opacity string) {
			fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="8" height="8" fill="%s"%s/><text x="%.0f" y="%.0f" class="l">%s</text>`,
				x, chartH-11, color, opacity, x+10, chartH-4, template.HTMLEscapeString(name))
			x += 14 + 5.5*float64(len(name))
		}
		for _, l := range c.lines {
			key(l.name, l.color, "")
		}
		for _, bd := range c.bands {
			key(bd.name, bd.color, ` fill-opacity="0.25"`)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// plotArea maps times and values to the chart's plot coordinates.
type plotArea struct {
	x0   time.Time
	span time.Duration
	w, h float64 // plot width and height
	top  float64 // the value at the plot's top
}

func (p plotArea) sx(t time.Time) float64 { return padL + float64(t.Sub(p.x0))/float64(p.span)*p.w }
func (p plotArea) sy(v float64) float64   { return padT + p.h - v/p.top*p.h }

// highest is the largest value drawn: a bucket's sum when stacked, else
// any one series' value or band's top.
func (c timeChart) highest() float64 {
	hi := 0.0
	for i := range c.ts {
		for _, bd := range c.bands {
			if !math.IsNaN(bd.lo[i]) && !math.IsNaN(bd.hi[i]) {
				hi = math.Max(hi, bd.hi[i])
			}
		}
		sum := 0.0
		for _, l := range c.lines {
			v := l.ys[i]
			if math.IsNaN(v) {
				continue
			}
			if c.stacked {
				sum += v
			} else {
				hi = math.Max(hi, v)
			}
		}
		hi = math.Max(hi, sum)
	}
	return hi
}

// xAxis draws the time axis up to x1, ticks on round times, at most 6, and
// returns the time layout its labels use.
func (c timeChart) xAxis(b *strings.Builder, p plotArea, x1 time.Time) string {
	tstep := tickSteps[len(tickSteps)-1]
	for _, s := range tickSteps {
		if p.span/s <= 6 {
			tstep = s
			break
		}
	}
	layout := timeLayout(p.span)
	for t := p.x0.Truncate(tstep); !t.After(x1); t = t.Add(tstep) {
		x := p.sx(t)
		if t.Before(p.x0) || x > chartW-padR-22 {
			continue // a label past the edge would be cut
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" class="a"/>`, x, padT+p.h, x, padT+p.h+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" class="l" text-anchor="middle">%s</text>`, x, padT+p.h+15, t.UTC().Format(layout))
	}
	fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" class="a"/>`, padL, padT+p.h, chartW-padR, padT+p.h)
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" class="l" text-anchor="end">UTC, %s buckets</text>`, chartW-padR, chartH-3, c.step)
	return layout
}

// bars draws the series stacked, one bar per bucket.
func (c timeChart) bars(b *strings.Builder, p plotArea, layout string) {
	bw := math.Max(1, float64(c.step)/float64(p.span)*p.w-0.5)
	for i, t := range c.ts {
		base := 0.0
		for _, l := range c.lines {
			v := l.ys[i]
			if math.IsNaN(v) || v <= 0 {
				continue
			}
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s %s</title></rect>`,
				p.sx(t), p.sy(base+v), bw, p.sy(base)-p.sy(base+v), l.color, t.UTC().Format(layout), l.name, short(v), c.unit)
			base += v
		}
	}
}

// shade draws each band as polygons over the buckets' width, one per run
// of buckets with both ends.
func (c timeChart) shade(b *strings.Builder, p plotArea) {
	for _, bd := range c.bands {
		for i := 0; i < len(c.ts); {
			if math.IsNaN(bd.lo[i]) || math.IsNaN(bd.hi[i]) {
				i++
				continue
			}
			j := i
			for j < len(c.ts) && !math.IsNaN(bd.lo[j]) && !math.IsNaN(bd.hi[j]) {
				j++
			}
			var top, bottom []string
			for k := i; k < j; k++ {
				x0, x1 := p.sx(c.ts[k]), p.sx(c.ts[k].Add(c.step))
				top = append(top, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x0, p.sy(bd.hi[k]), x1, p.sy(bd.hi[k])))
				bottom = append(bottom, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x1, p.sy(bd.lo[k]), x0, p.sy(bd.lo[k])))
			}
			slices.Reverse(bottom)
			fmt.Fprintf(b, `<polygon points="%s %s" fill="%s" fill-opacity="0.25" stroke="none"><title>%s</title></polygon>`,
				strings.Join(top, " "), strings.Join(bottom, " "), bd.color, template.HTMLEscapeString(bd.name))
			i = j
		}
	}
}

// paths draws each series as a line, broken where a bucket has no value.
func (c timeChart) paths(b *strings.Builder, p plotArea) {
	for _, l := range c.lines {
		var path strings.Builder
		pen := "M"
		for i, t := range c.ts {
			v := l.ys[i]
			if math.IsNaN(v) {
				pen = "M"
				continue
			}
			// Each bucket is drawn at its middle.
			fmt.Fprintf(&path, "%s%.1f %.1f ", pen, p.sx(t.Add(c.step/2)), p.sy(v))
			pen = "L"
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`, strings.TrimSpace(path.String()), l.color)
	}
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
	title := "GPU utilization vs system tokens/s, one dot per bucket"
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">`, chartW, chartH, title)
	fmt.Fprintf(&b, `<text x="%.0f" y="15" class="t">%s</text>`, padL, title)
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="n">no data in this range</text></svg>`, padL, chartH/2)
		return template.HTML(b.String())
	}
	_, y1 := minmax(ys)
	ticks := niceTicks(y1, 4)
	top := ticks[len(ticks)-1]
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	sy := func(v float64) float64 { return padT + plotH - v/top*plotH }
	sx := func(v float64) float64 { return padL + v/100*plotW }
	for _, v := range ticks {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" class="g"/><text x="%.0f" y="%.1f" class="l" text-anchor="end">%s</text>`,
			padL, sy(v), chartW-padR, sy(v), padL-4, sy(v)+3, short(v))
	}
	for _, v := range []float64{0, 25, 50, 75, 100} {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" class="l" text-anchor="middle">%.0f%%</text>`, sx(v), padT+plotH+15, v)
	}
	fmt.Fprintf(&b, `<text x="4" y="%.0f" class="u" transform="rotate(-90 10 %.0f)">tokens/s</text>`, padT+plotH/2+24, padT+plotH/2)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" class="l" text-anchor="end">GPU utilization</text>`, chartW-padR, chartH-3)
	for i := range xs {
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.4" fill="#7a4fd6" fill-opacity="0.6"/>`, sx(xs[i]), sy(ys[i]))
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
