package curve

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/schema"
)

// Cell is one rollup point of the curve: the windows of one bin of one
// curve in one period, with the period's quantiles of both rates over
// them (exact), or as read back over a range (each quantile the
// windows-weighted mean over the periods of the period's own).
type Cell struct {
	Key        Key
	Kind       Kind
	Bin        string // a BinLabels label
	Windows    float64
	GPUSeconds float64
	RunningSum float64
	Sys, User  *Stat // as read back: P10, P50, P90 (Mean absent); nil: no window had the rate
	// Best is the window of the highest system TPS, with its per-user TPS
	// (absent: none had both).
	Best *Pair

	sys, user dist // the windows' values while the cell is gathered
}

// add counts one window into the cell.
func (x *Cell) add(w Window) {
	x.Windows++
	x.GPUSeconds += w.Seconds * float64(w.GPUs)
	x.RunningSum += w.Running.V
	if w.SystemTPS.OK {
		x.sys = append(x.sys, wv{w.SystemTPS.V, 1})
	}
	if w.PerUserTPS.OK {
		x.user = append(x.user, wv{w.PerUserTPS.V, 1})
	}
	if w.SystemTPS.OK && w.PerUserTPS.OK && (x.Best == nil || w.SystemTPS.V > x.Best.SystemTPS) {
		x.Best = &Pair{PerUserTPS: w.PerUserTPS.V, SystemTPS: w.SystemTPS.V, Running: w.Running.V}
	}
}

func quantiles(d dist) *Stat {
	if d.count() == 0 {
		return nil
	}
	return &Stat{P10: d.quantile(0.1), P50: d.quantile(0.5), P90: d.quantile(0.9)}
}

// Fields are the cell as a rollup point's fields (schema's curve names):
// each quantile times the windows it is over, so that sums over periods
// divided by the windows are the windows-weighted mean of the periods'.
func (x *Cell) Fields() map[string]any {
	f := map[string]any{schema.FieldWindows: int64(x.Windows), schema.FieldGPUSeconds: x.GPUSeconds, schema.FieldRunningSum: x.RunningSum}
	put := func(st *Stat, n float64, wf, p10, p50, p90 string) {
		if st == nil || n == 0 {
			return
		}
		f[wf], f[p10], f[p50], f[p90] = int64(n), st.P10*n, st.P50*n, st.P90*n
	}
	put(quantiles(x.sys), x.sys.count(), schema.FieldSysWindows, schema.FieldSysP10Sum, schema.FieldSysP50Sum, schema.FieldSysP90Sum)
	put(quantiles(x.user), x.user.count(), schema.FieldUserWindows, schema.FieldUserP10Sum, schema.FieldUserP50Sum, schema.FieldUserP90Sum)
	if x.Best != nil {
		f[schema.FieldSysMax], f[schema.FieldUserAtMax], f[schema.FieldRunAtMax] = x.Best.SystemTPS, x.Best.PerUserTPS, x.Best.Running
	}
	return f
}

// CellFromRow reads a cell back from a query row whose columns are the
// fields' names summed over a range; num turns a column's value into a
// number. The best window is read apart (BestFromRow).
func CellFromRow(key Key, bin, kind string, row map[string]any, num func(any) (float64, bool)) Cell {
	x := Cell{Key: key, Bin: bin, Kind: Kind(kind)}
	get := func(f string) float64 {
		v, _ := num(row[f])
		return v
	}
	x.Windows, x.GPUSeconds, x.RunningSum = get(schema.FieldWindows), get(schema.FieldGPUSeconds), get(schema.FieldRunningSum)
	stat := func(nf, p10, p50, p90 string) *Stat {
		n := get(nf)
		a, ok1 := num(row[p10])
		b, ok2 := num(row[p50])
		c, ok3 := num(row[p90])
		if n <= 0 || !ok1 || !ok2 || !ok3 {
			return nil
		}
		return &Stat{P10: a / n, P50: b / n, P90: c / n}
	}
	x.Sys = stat(schema.FieldSysWindows, schema.FieldSysP10Sum, schema.FieldSysP50Sum, schema.FieldSysP90Sum)
	x.User = stat(schema.FieldUserWindows, schema.FieldUserP10Sum, schema.FieldUserP50Sum, schema.FieldUserP90Sum)
	return x
}

// CellFields are the fields a range's read sums.
var CellFields = []string{schema.FieldWindows, schema.FieldGPUSeconds, schema.FieldRunningSum,
	schema.FieldSysWindows, schema.FieldSysP10Sum, schema.FieldSysP50Sum, schema.FieldSysP90Sum,
	schema.FieldUserWindows, schema.FieldUserP10Sum, schema.FieldUserP50Sum, schema.FieldUserP90Sum}

// Cells gathers windows into rollup cells: per series (its tags), period,
// bin and kind.
type Cells struct {
	m     map[string]*cellAt
	Every time.Duration
	// Skipped counts windows left out, by reason; Idle those under 0.5
	// running (no cell).
	Skipped map[string]int
	Idle    int
}

type cellAt struct {
	Cell
	tags   map[string]string
	period time.Time
}

// NewCells gathers cells of periods every long.
func NewCells(every time.Duration) *Cells {
	return &Cells{m: map[string]*cellAt{}, Every: every, Skipped: map[string]int{}}
}

// Add counts window w, of the series tags at time t, into its cell.
func (cs *Cells) Add(tags map[string]string, t time.Time, w Window) {
	if why := w.check(); why != "" {
		cs.Skipped[why]++
		return
	}
	i := BinOf(w.Running.V)
	if i < 0 {
		cs.Idle++
		return
	}
	p := t.UTC().Truncate(cs.Every)
	kind := KindOf(w.Tokens, w.PromptTokens)
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var id strings.Builder
	fmt.Fprintf(&id, "%d\x00%d\x00%s", p.Unix(), i, kind)
	for _, k := range keys {
		id.WriteString("\x00" + k + "=" + tags[k])
	}
	c, ok := cs.m[id.String()]
	if !ok {
		c = &cellAt{Cell: Cell{Key: w.Key, Kind: kind, Bin: bins[i].label()}, tags: tags, period: p}
		cs.m[id.String()] = c
	}
	c.add(w)
}

// Each hands every cell, in a stable order, with its point's tags (the
// series' plus bin and kind) and period start, to f.
func (cs *Cells) Each(f func(tags map[string]string, period time.Time, fields map[string]any) error) error {
	ids := make([]string, 0, len(cs.m))
	for id := range cs.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c := cs.m[id]
		tags := map[string]string{schema.TagRunningBin: c.Bin, schema.TagKind: string(c.Kind)}
		for k, v := range c.tags {
			tags[k] = v
		}
		if err := f(tags, c.period, c.Fields()); err != nil {
			return err
		}
	}
	return nil
}

// Len is how many cells there are.
func (cs *Cells) Len() int { return len(cs.m) }

// BestFromRow reads a cell's best window from a row with its fields'
// names; nil when the row has none.
func BestFromRow(row map[string]any, num func(any) (float64, bool)) *Pair {
	s, ok1 := num(row[schema.FieldSysMax])
	u, ok2 := num(row[schema.FieldUserAtMax])
	r, _ := num(row[schema.FieldRunAtMax])
	if !ok1 || !ok2 {
		return nil
	}
	return &Pair{PerUserTPS: u, SystemTPS: s, Running: r}
}
