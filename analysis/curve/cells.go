package curve

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/schema"
)

// histField names a histogram bucket's field: prefix and index, "z" for
// the zero bucket.
func histField(prefix string, k int) string {
	if k == HistZero {
		return prefix + "z"
	}
	return prefix + strconv.Itoa(k)
}

// parseHist reads a histogram field's bucket: ok false for another field.
func parseHist(prefix, field string) (int, bool) {
	rest, ok := strings.CutPrefix(field, prefix)
	if !ok {
		return 0, false
	}
	if rest == "z" {
		return HistZero, true
	}
	k, err := strconv.Atoi(rest)
	return k, err == nil && k >= 0 && k <= histTop
}

// add counts one window into the cell.
func (x *Cell) add(w Window) {
	x.Windows++
	x.GPUSeconds += w.Seconds * float64(w.GPUs)
	x.RunningSum += w.Running.V
	if w.SystemTPS.OK {
		x.SysSum += w.SystemTPS.V
		x.Sys[HistIndex(w.SystemTPS.V)]++
	}
	if w.PerUserTPS.OK {
		x.UserSum += w.PerUserTPS.V
		x.User[HistIndex(w.PerUserTPS.V)]++
	}
	if w.SystemTPS.OK && w.PerUserTPS.OK && (x.Best == nil || w.SystemTPS.V > x.Best.SystemTPS) {
		x.Best = &Pair{PerUserTPS: w.PerUserTPS.V, SystemTPS: w.SystemTPS.V, Running: w.Running.V}
	}
}

// Fields are the cell as a rollup point's fields (schema's curve names).
func (x *Cell) Fields() map[string]any {
	f := map[string]any{
		schema.FieldWindows: int64(x.Windows), schema.FieldGPUSeconds: x.GPUSeconds,
		schema.FieldRunningSum: x.RunningSum, schema.FieldSysSum: x.SysSum, schema.FieldUserSum: x.UserSum,
	}
	for k, n := range x.Sys {
		f[histField(schema.CurveSysHist, k)] = int64(n)
	}
	for k, n := range x.User {
		f[histField(schema.CurveUserHist, k)] = int64(n)
	}
	if x.Best != nil {
		f[schema.FieldSysMax], f[schema.FieldUserAtMax], f[schema.FieldRunAtMax] = x.Best.SystemTPS, x.Best.PerUserTPS, x.Best.Running
	}
	return f
}

// CellFromRow reads a cell back from a query row whose columns are the
// fields' names after prefix ("sum_" for SELECT sum(*)); num turns a
// column's value into a number. The best window is not read here: sums
// of it mean nothing.
func CellFromRow(key Key, bin, kind, prefix string, row map[string]any, num func(any) (float64, bool)) Cell {
	x := Cell{Key: key, Bin: bin, Kind: Kind(kind), Sys: map[int]float64{}, User: map[int]float64{}}
	get := func(f string) float64 {
		v, _ := num(row[prefix+f])
		return v
	}
	x.Windows, x.GPUSeconds, x.RunningSum = get(schema.FieldWindows), get(schema.FieldGPUSeconds), get(schema.FieldRunningSum)
	x.SysSum, x.UserSum = get(schema.FieldSysSum), get(schema.FieldUserSum)
	for col, v := range row {
		f, ok := strings.CutPrefix(col, prefix)
		if !ok {
			continue
		}
		n, ok := num(v)
		if !ok || n == 0 {
			continue
		}
		if k, ok := parseHist(schema.CurveSysHist, f); ok {
			x.Sys[k] += n
		} else if k, ok := parseHist(schema.CurveUserHist, f); ok {
			x.User[k] += n
		}
	}
	return x
}

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
		c = &cellAt{Cell: Cell{Key: w.Key, Kind: kind, Bin: bins[i].label(), Sys: map[int]float64{}, User: map[int]float64{}}, tags: tags, period: p}
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
