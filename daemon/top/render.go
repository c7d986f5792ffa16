package top

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/schema"
)

// NVML's clock event reasons (nvmlClocksEventReason*), short, the limits
// that hurt most first so that a narrow column still shows them.
var throttleNames = []struct {
	bit  int64
	name string
}{
	{0x40, "hw-thermal"}, {0x80, "power-brake"}, {0x8, "hw-slowdown"}, {0x20, "sw-thermal"}, {0x4, "sw-power"},
	{0x10, "sync-boost"}, {0x2, "app-clocks"}, {0x100, "display"}, {0x1, "idle"},
}

// idleBits are reasons that hold clocks down by choice, not by a limit.
const idleBits = 0x1 | 0x2 | 0x100

func throttleText(bits int64) string {
	if bits < 0 {
		return "-"
	}
	if bits == 0 {
		return "none"
	}
	var names []string
	for _, t := range throttleNames {
		if bits&t.bit != 0 {
			names = append(names, t.name)
			bits &^= t.bit
		}
	}
	if bits != 0 {
		names = append(names, fmt.Sprintf("0x%x", bits))
	}
	return strings.Join(names, ",")
}

// Styles colour the view; from a renderer without colours they leave the
// text as it is.
type Styles struct {
	title, dim, bad, warn, good, unused lipgloss.Style
}

// NewStyles returns the styles of renderer r.
func NewStyles(r *lipgloss.Renderer) Styles {
	return Styles{
		title:  r.NewStyle().Bold(true),
		dim:    r.NewStyle().Faint(true),
		bad:    r.NewStyle().Foreground(lipgloss.Color("9")).Bold(true),
		warn:   r.NewStyle().Foreground(lipgloss.Color("11")),
		good:   r.NewStyle().Foreground(lipgloss.Color("10")),
		unused: r.NewStyle().Reverse(true),
	}
}

func (s Styles) state(state string) lipgloss.Style {
	switch state {
	case schema.StateOK:
		return s.good
	case schema.StateIdle, schema.StateSleeping, "-":
		return s.dim
	case schema.StateDown:
		return s.bad
	}
	return s.warn
}

// Options shape one rendering.
type Options struct {
	Width  int // columns; narrower views drop the least needed columns
	Height int // lines; 0: as many as the rows need (--once)
	Sort   SortKey
	Filter bool // only the rows that need a look
	Keys   bool // show the keys (the live view)
	ASCII  bool // sparkline from ASCII characters (dumb terminals)
	Loc    *time.Location
	// Status is shown under the title: the connection's trouble.
	Status string
	// Floor is the per-user tokens/s objective of each server's operating
	// point line, shown under the servers where the lines fit (0: 20).
	Floor  float64
	Styles Styles
}

// column is one column of a table: its title, width, how much it is
// needed (lower: kept longer when the terminal is narrow), and its cell.
type column[R any] struct {
	title string
	width int
	prio  int
	left  bool
	cell  func(R) string
	style func(R, string) string
}

// fit keeps the columns that fit width, dropping the least needed first.
func fit[R any](cols []column[R], width int) []column[R] {
	keep := append([]column[R](nil), cols...)
	total := func() int {
		n := 0
		for _, c := range keep {
			n += c.width + 1
		}
		return n - 1
	}
	for len(keep) > 1 && total() > width {
		worst := 0
		for i, c := range keep {
			if c.prio > keep[worst].prio {
				worst = i
			}
		}
		keep = append(keep[:worst], keep[worst+1:]...)
	}
	return keep
}

func pad(s string, w int, left bool) string {
	s = ansi.Truncate(s, w, "…")
	n := w - ansi.StringWidth(s)
	if n <= 0 {
		return s
	}
	if left {
		return s + strings.Repeat(" ", n)
	}
	return strings.Repeat(" ", n) + s
}

func table[R any](cols []column[R], rows []R, st Styles) []string {
	var b strings.Builder
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pad(c.title, c.width, c.left))
	}
	lines := []string{st.title.Render(strings.TrimRight(b.String(), " "))}
	for _, r := range rows {
		b.Reset()
		var cells []string
		for _, c := range cols {
			cell := pad(c.cell(r), c.width, c.left)
			if c.style != nil {
				cell = c.style(r, cell)
			}
			cells = append(cells, cell)
		}
		lines = append(lines, strings.TrimRight(strings.Join(cells, " "), " "))
	}
	return lines
}

func f1(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v*100)
}

// hasLatency tells whether a server's window carries latency fields.
func hasLatency(rows []serverRow) bool {
	for _, r := range rows {
		for _, v := range []float64{r.ttft90, r.ttft90Lo, r.itl90, r.itl90Lo, r.sloLo} {
			if !math.IsNaN(v) {
				return true
			}
		}
	}
	return false
}

// ms is a latency in milliseconds, or ">lo" when only its lower bound is
// known (a p90 above a histogram's last edge).
func ms(v, lo float64) string {
	switch {
	case !math.IsNaN(v):
		return fmt.Sprintf("%.*f", msPrec(v), 1e3*v)
	case !math.IsNaN(lo):
		return fmt.Sprintf(">%.*f", msPrec(lo), 1e3*lo)
	}
	return "-"
}

func msPrec(v float64) int {
	if v < 0.01 {
		return 1
	}
	return 0
}

// share is an attainment in percent: one number when known exactly, its
// bounds when only those are (histograms).
func share(lo, hi float64) string {
	switch {
	case math.IsNaN(lo) || math.IsNaN(hi):
		return "-"
	case lo == hi:
		return fmt.Sprintf("%.1f", 100*lo)
	}
	return fmt.Sprintf("%.0f-%.0f", 100*lo, 100*hi)
}

func unit(v float64, prec int, u string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.*f%s", prec, v, u)
}

func memText(used, total float64) string {
	if math.IsNaN(used) {
		return "-"
	}
	const gib = 1 << 30
	return fmt.Sprintf("%.1f/%.0fG", used/gib, total/gib)
}

var (
	blocks = []rune("▁▂▃▄▅▆▇█")
	ascii  = []rune("_.-=+*#@")
)

// sparkline draws the last width values, scaled to the largest; an
// unknown value is a blank.
func sparkline(vals []float64, width int, asciiOnly bool) string {
	if width <= 0 {
		return ""
	}
	if len(vals) > width {
		vals = vals[len(vals)-width:]
	}
	ramp := blocks
	if asciiOnly {
		ramp = ascii
	}
	top := 0.0
	for _, v := range vals {
		if !math.IsNaN(v) {
			top = math.Max(top, v)
		}
	}
	var b strings.Builder
	for _, v := range vals {
		switch {
		case math.IsNaN(v):
			b.WriteByte(' ')
		case top <= 0:
			b.WriteRune(ramp[0])
		default:
			b.WriteRune(ramp[min(len(ramp)-1, int(v/top*float64(len(ramp)-1)+0.5))])
		}
	}
	return b.String()
}

// Render draws one API answer.
func Render(w api.Windows, o Options) string { return render(build(w), o) }

func render(f frame, o Options) string {
	st := o.Styles
	width := o.Width
	if width <= 0 {
		width = 120
	}
	lines := []string{st.title.Render(ansi.Truncate(titleLine(f, o, width), width, "…"))}
	if o.Status != "" {
		lines = append(lines, st.bad.Render(ansi.Truncate(o.Status, width, "…")))
	}

	servers := append([]serverRow(nil), f.servers...)
	sortServers(servers, o.Sort)
	gpus := append([]gpuRow(nil), f.gpus...)
	if o.Filter {
		servers = keepIf(servers, serverRow.needsLook)
		gpus = keepIf(gpus, gpuRow.needsLook)
	}

	nameW := 6
	for _, r := range servers {
		nameW = max(nameW, min(20, ansi.StringWidth(r.name)))
	}
	serverLines := table(serverColumns(nameW, width, o, anyMBU(servers), hasLatency(servers)), servers, st)
	// A suspect window's values are shown as written; the rules that doubt
	// them follow the table.
	for _, r := range servers {
		if r.suspect != "" {
			serverLines = append(serverLines, st.warn.Render(ansi.Truncate("suspect "+r.name+": "+r.suspect, width, "…")))
		}
		if why := ttftNarrow(r); why != "" {
			serverLines = append(serverLines, st.dim.Render(ansi.Truncate("  "+r.name+": TTFT90 "+why, width, "…")))
		}
	}
	gpuLines := table(fit(gpuColumns(nameW, st), width), gpus, st)

	switch {
	case len(f.servers) == 0:
		serverLines = append(serverLines, st.dim.Render("(no server monitored)"))
	case len(servers) == 0:
		serverLines = append(serverLines, st.dim.Render(fmt.Sprintf("(none of %d servers needs a look: f shows all)", len(f.servers))))
	}
	switch {
	case len(f.gpus) == 0:
		gpuLines = append(gpuLines, st.dim.Render("(no GPU sampled)"))
	case len(gpus) == 0:
		gpuLines = append(gpuLines, st.dim.Render(fmt.Sprintf("(none of %d GPUs needs a look: f shows all)", len(f.gpus))))
	}
	// The operating point per server, where every line still fits.
	if len(servers) > 0 && (o.Height <= 0 || len(lines)+2+len(serverLines)+len(servers)+len(gpuLines) <= o.Height) {
		floor := o.Floor
		if floor <= 0 {
			floor = 20
		}
		for _, r := range servers {
			serverLines = append(serverLines, st.dim.Render(ansi.Truncate("  "+r.name+": "+r.curveLine(floor), width, "…")))
		}
	}
	if o.Height > 0 {
		// Rows that do not fit are counted, GPUs first, then servers.
		room := o.Height - len(lines) - 2
		serverLines, gpuLines = clip(serverLines, gpuLines, room, st)
	}
	lines = append(lines, "")
	lines = append(lines, serverLines...)
	lines = append(lines, "")
	lines = append(lines, gpuLines...)
	return strings.Join(lines, "\n")
}

// titleLine is the first line before truncation: host, window, the last
// closed window's age and, where they fit, the keys.
func titleLine(f frame, o Options, width int) string {
	loc := o.Loc
	if loc == nil {
		loc = time.Local
	}
	title := "tpsmon top"
	if f.host != "" {
		title += " · " + f.host
	}
	if f.window > 0 {
		title += " · window " + f.window.String()
	}
	if !f.lastClosed.IsZero() {
		end := f.lastClosed.Add(f.window)
		title += fmt.Sprintf(" · closed %s (%s ago)", end.In(loc).Format("15:04:05"), f.now.Sub(end).Truncate(100*time.Millisecond))
	} else {
		title += " · no window closed yet"
	}
	keys := fmt.Sprintf("q quit · s sort:%s · f %s", o.Sort, map[bool]string{false: "all", true: "needs a look"}[o.Filter])
	if o.Keys && ansi.StringWidth(title)+2+ansi.StringWidth(keys) <= width {
		title += strings.Repeat(" ", width-ansi.StringWidth(title)-ansi.StringWidth(keys)) + keys
	}
	return title
}

// anyMBU says whether a server row has an MBU.
func anyMBU(rows []serverRow) bool {
	for _, r := range rows {
		if !math.IsNaN(r.mbu) {
			return true
		}
	}
	return false
}

// serverColumns are the server table's columns that fit width, then a
// history sparkline in what is left.
//
// The latency columns are there when a server has latency fields (an
// engine with histograms, or request lines), with the sparkline's least
// width kept for it.
func serverColumns(nameW, width int, o Options, mbu, latency bool) []column[serverRow] {
	st := o.Styles
	scols := []column[serverRow]{
		{title: "SERVER", width: nameW, prio: 0, left: true, cell: func(r serverRow) string { return r.name }},
		{title: "STATE", width: 13, prio: 0, left: true, cell: func(r serverRow) string { return r.state },
			style: func(r serverRow, s string) string { return st.state(r.state).Render(s) }},
		{title: "TOK/S", width: 8, prio: 0, cell: func(r serverRow) string { return f1(r.tps, 1) }},
		{title: "NOW", width: 8, prio: 3, cell: func(r serverRow) string { return f1(r.now, 1) }},
		{title: "USER/S", width: 7, prio: 1, cell: func(r serverRow) string { return f1(r.user, 1) }},
		{title: "RUN", width: 5, prio: 1, cell: func(r serverRow) string { return f1(r.running, 0) }},
		{title: "WAIT", width: 5, prio: 1, cell: func(r serverRow) string { return f1(r.waiting, 1) }},
		{title: "KV%", width: 4, prio: 2, cell: func(r serverRow) string { return pct(r.kv) }},
		{title: "PROMPT/S", width: 8, prio: 4, cell: func(r serverRow) string { return f1(r.prompt, 0) }},
		{title: "TOK/J", width: 6, prio: 3, cell: func(r serverRow) string { return f1(r.tpj, 2) }},
		{title: "GPUS", width: 5, prio: 5, left: true, cell: func(r serverRow) string { return r.gpus }},
	}
	if mbu {
		// MBU%: the share of the GPUs' peak bandwidth the decode steps
		// read (servers with model facts; above 100 a fact is wrong).
		// Shown only where a server has one.
		scols = slices.Insert(scols, 8, column[serverRow]{title: "MBU%", width: 4, prio: 2, cell: func(r serverRow) string { return pct(r.mbu) }})
	}
	if latency {
		scols = append(scols[:len(scols)-1:len(scols)-1],
			column[serverRow]{title: "TTFT90ms", width: 8, prio: 3, cell: func(r serverRow) string { return ms(r.ttft90, r.ttft90Lo) }},
			column[serverRow]{title: "ITL90ms", width: 7, prio: 3, cell: func(r serverRow) string { return ms(r.itl90, r.itl90Lo) }},
			column[serverRow]{title: "SLO%", width: 7, prio: 2, cell: func(r serverRow) string { return share(r.sloLo, r.sloHi) }},
			scols[len(scols)-1])
		scols = fit(scols, width-9)
	} else {
		scols = fit(scols, width)
	}
	used := 0
	for _, c := range scols {
		used += c.width + 1
	}
	if spark := min(width-used, 60); spark >= 8 {
		scols = append(scols, column[serverRow]{title: "HISTORY", width: spark, left: true,
			cell: func(r serverRow) string { return sparkline(r.history, spark, o.ASCII) }})
	}
	return scols
}

// gpuColumns are the GPU table's columns before fitting.
func gpuColumns(nameW int, st Styles) []column[gpuRow] {
	return []column[gpuRow]{
		{title: "GPU", width: 5, prio: 0, left: true, cell: func(r gpuRow) string { return r.label }},
		{title: "UTIL%", width: 5, prio: 0, cell: func(r gpuRow) string { return f1(r.util, 0) }},
		{title: "NOW", width: 4, prio: 3, cell: func(r gpuRow) string { return f1(r.now, 0) }},
		{title: "SM%", width: 4, prio: 1, cell: func(r gpuRow) string { return f1(r.sm, 0) }},
		{title: "MEM", width: 10, prio: 1, cell: func(r gpuRow) string { return memText(r.memUsed, r.memTotal) }},
		{title: "POWER", width: 6, prio: 1, cell: func(r gpuRow) string { return unit(r.power, 0, "W") }},
		{title: "TEMP", width: 5, prio: 2, cell: func(r gpuRow) string { return unit(r.temp, 0, "C") }},
		{title: "THROTTLE", width: 16, prio: 2, left: true, cell: func(r gpuRow) string { return throttleText(r.throttle) },
			style: func(r gpuRow, s string) string {
				if r.throttle > 0 && r.throttle&^idleBits != 0 {
					return st.warn.Render(s)
				}
				return s
			}},
		{title: "SERVER", width: nameW, prio: 0, left: true, cell: gpuRow.serverText, style: func(r gpuRow, s string) string {
			switch {
			case r.err != "":
				return st.bad.Render(s)
			case r.closed && r.server == "":
				return st.unused.Render(s)
			}
			return s
		}},
		{title: "NAME", width: 24, prio: 4, left: true, cell: func(r gpuRow) string { return r.name }},
	}
}

// serverText is what the GPU table's SERVER column says: the server the
// GPU served, or why there is none.
func (r gpuRow) serverText() string {
	switch {
	case r.err != "":
		return "ERROR " + r.err
	case !r.closed:
		return "-"
	case r.server == "":
		return "UNUSED"
	}
	return r.server
}

// clip fits two tables into room lines, cutting the second first; a cut
// table ends in a line that says how many rows are hidden.
func clip(a, b []string, room int, st Styles) ([]string, []string) {
	cut := func(t []string, n int) []string {
		if n >= len(t) {
			return t
		}
		if n <= 0 {
			return nil
		}
		hidden := len(t) - n + 1
		return append(t[:n-1:n-1], st.dim.Render(fmt.Sprintf("… %d more rows (a taller terminal shows them)", hidden)))
	}
	if len(a)+len(b) <= room {
		return a, b
	}
	if len(a) >= room-1 {
		return cut(a, room-1), cut(b, 1)
	}
	return a, cut(b, room-len(a))
}

func keepIf[R any](rows []R, keep func(R) bool) []R {
	out := rows[:0]
	for _, r := range rows {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// ttftNarrow says when a server's TTFT, read from its log, counts from
// later than the request's arrival (schema.FieldTTFTBasis), and what
// would widen it; empty where it counts from the arrival or is unknown.
func ttftNarrow(r serverRow) string {
	if !(r.ttft90 >= 0) { // unknown is NaN
		return ""
	}
	return schema.TTFTNarrowed(r.ttftBasis)
}
