package curve

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/schema"
)

// Cell is one bin of one curve as read back from rollups over a range:
// its windows, GPU-seconds and running sum, each rate's quantiles (the
// windows-weighted means over the periods of each period's own, exact
// within one period), and the sums of its exact means.
type Cell struct {
	Key        Key
	Kind       Kind
	Bin        string // a BinLabels label
	Windows    float64
	GPUSeconds float64
	RunningSum float64
	Sys, User  *Stat // P10, P50, P90 (Mean is read from Means); nil: no window had the rate
	Means      Means
	// Best is the window of the highest system TPS, with its per-user TPS
	// (absent: none had both).
	Best *Pair
	// sketched: every period's cell came with its rates' sketches, whose
	// buckets then give the quantiles (SketchExactness).
	sketched      bool
	sysSk, userSk sketch
}

// cellSum is one bin over one period or summed over several: counts and
// each quantile times the windows it is over.
type cellSum struct {
	w, g, r           float64
	sn, s10, s50, s90 float64
	un, u10, u50, u90 float64
	best              *Pair
	means             Means
	sys, user         dist // values while one period is gathered
	// Each rate's sketch (sketch.go): made when a period closes, added up
	// over a range's periods.
	sysSk, userSk sketch
}

func (c *cellSum) add(w Window) {
	c.w++
	c.g += w.Seconds * float64(w.GPUs)
	c.r += w.Running.V
	c.means.add(w)
	if w.SystemTPS.OK {
		c.sys = append(c.sys, wv{w.SystemTPS.V, 1})
	}
	if w.PerUserTPS.OK {
		c.user = append(c.user, wv{w.PerUserTPS.V, 1})
	}
	if w.SystemTPS.OK && w.PerUserTPS.OK && (c.best == nil || w.SystemTPS.V > c.best.SystemTPS) {
		c.best = &Pair{PerUserTPS: w.PerUserTPS.V, SystemTPS: w.SystemTPS.V, Running: w.Running.V}
	}
}

// close turns the period's values into its quantile sums and sketches.
func (c *cellSum) close() {
	c.sysSk, c.userSk = sketchOf(c.sys), sketchOf(c.user)
	if n := c.sys.count(); n > 0 {
		p := c.sys.quantiles(0.1, 0.5, 0.9)
		c.sn, c.s10, c.s50, c.s90 = n, n*p[0], n*p[1], n*p[2]
	}
	if n := c.user.count(); n > 0 {
		p := c.user.quantiles(0.1, 0.5, 0.9)
		c.un, c.u10, c.u50, c.u90 = n, n*p[0], n*p[1], n*p[2]
	}
	c.sys, c.user = nil, nil
}

func (c *cellSum) merge(o *cellSum) {
	c.w, c.g, c.r = c.w+o.w, c.g+o.g, c.r+o.r
	c.sn, c.s10, c.s50, c.s90 = c.sn+o.sn, c.s10+o.s10, c.s50+o.s50, c.s90+o.s90
	c.un, c.u10, c.u50, c.u90 = c.un+o.un, c.u10+o.u10, c.u50+o.u50, c.u90+o.u90
	c.means.merge(o.means)
	c.sysSk.merge(&o.sysSk)
	c.userSk.merge(&o.userSk)
	if o.best != nil && (c.best == nil || o.best.SystemTPS > c.best.SystemTPS) {
		b := *o.best
		c.best = &b
	}
}

// record is a cell in the cells field: kind,bin and 18 numbers (an empty
// one absent), records joined by ";": windows, GPU-seconds, running sum,
// each rate's count and quantiles times it, the best window (system,
// per-user, running), and the means' sums (Means' four, in order; empty
// where incomplete).
func (c *cellSum) record(kind Kind, bin string) string {
	// Seven significant digits (a relative 5e-8): half the bytes of
	// exact ones, and the report reads 30 days of them for a fleet.
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 7, 64) }
	m := c.means
	parts := []string{string(kind), bin, f(c.w), f(c.g), f(c.r), f(c.sn), f(c.s10), f(c.s50), f(c.s90), f(c.un), f(c.u10), f(c.u50), f(c.u90), "", "", "",
		f(m.SysSeconds), f(m.SysSum), f(m.UserWeight), f(m.UserSum)}
	if m.Incomplete { // absent: the means are not known
		parts[16], parts[17], parts[18], parts[19] = "", "", "", ""
	}
	if c.best != nil {
		parts[13], parts[14], parts[15] = f(c.best.SystemTPS), f(c.best.PerUserTPS), f(c.best.Running)
	}
	return strings.Join(parts, ",")
}

// parseRecord reads one record back; an error names what is wrong. A
// record of 16 parts (written before the means) has no means: they are
// then absent, never 0.
func parseRecord(s string) (Kind, string, *cellSum, error) {
	p := strings.Split(s, ",")
	if len(p) != 16 && len(p) != 20 {
		return "", "", nil, fmt.Errorf("curve cell %q: %d parts, want 20 (or 16, without means)", s, len(p))
	}
	kind, bin := Kind(p[0]), p[1]
	if (kind != Decode && kind != Prompt && kind != Unclassified) || binIndex(bin) < 0 {
		return "", "", nil, fmt.Errorf("curve cell %q: kind %q or bin %q unknown", s, kind, bin)
	}
	var v [18]float64
	incomplete := len(p) == 16
	for i := 2; i < len(p); i++ {
		if p[i] == "" && i >= 13 {
			incomplete = incomplete || i >= 16
			continue
		}
		x, err := strconv.ParseFloat(p[i], 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return "", "", nil, fmt.Errorf("curve cell %q: part %d %q is not a number >= 0", s, i+1, p[i])
		}
		v[i-2] = x
	}
	c := &cellSum{w: v[0], g: v[1], r: v[2], sn: v[3], s10: v[4], s50: v[5], s90: v[6], un: v[7], u10: v[8], u50: v[9], u90: v[10]}
	if p[13] != "" && p[14] != "" {
		c.best = &Pair{SystemTPS: v[11], PerUserTPS: v[12], Running: v[13]}
	}
	c.means = Means{SysSeconds: v[14], SysSum: v[15], UserWeight: v[16], UserSum: v[17], Incomplete: incomplete}
	return kind, bin, c, nil
}

// sketchRecord is a cell in the sketches field: kind,bin,SYS,USER, each
// rate's sketch (sketch.String).
func (c *cellSum) sketchRecord(kind Kind, bin string) string {
	return string(kind) + "," + bin + "," + c.sysSk.String() + "," + c.userSk.String()
}

// frontierBin marks a sketches record that holds a kind's frontier:
// kind,F,per-user:system:running/… (each number exact).
const frontierBin = "F"

func frontierRecord(kind Kind, ps []Pair) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = f(p.PerUserTPS) + ":" + f(p.SystemTPS) + ":" + f(p.Running)
	}
	return string(kind) + "," + frontierBin + "," + strings.Join(parts, "/")
}

func parseFrontier(s string) ([]Pair, error) {
	var out []Pair
	for _, p := range strings.Split(s, "/") {
		v := strings.Split(p, ":")
		if len(v) != 3 {
			return nil, fmt.Errorf("frontier point %q: want per-user:system:running", p)
		}
		var x [3]float64
		for i := range v {
			n, err := strconv.ParseFloat(v[i], 64)
			if err != nil || !(n >= 0) || n > maxRate {
				return nil, fmt.Errorf("frontier point %q: %q is not a rate", p, v[i])
			}
			x[i] = n
		}
		out = append(out, Pair{PerUserTPS: x[0], SystemTPS: x[1], Running: x[2]})
	}
	return out, nil
}

// cell turns summed records into a Cell.
func (c *cellSum) cell(k Key, kind Kind, bin string) Cell {
	x := Cell{Key: k, Kind: kind, Bin: bin, Windows: c.w, GPUSeconds: c.g, RunningSum: c.r, Best: c.best, Means: c.means,
		sysSk: c.sysSk, userSk: c.userSk}
	if c.sn > 0 {
		x.Sys = &Stat{P10: c.s10 / c.sn, P50: c.s50 / c.sn, P90: c.s90 / c.sn}
	}
	if c.un > 0 {
		x.User = &Stat{P10: c.u10 / c.un, P50: c.u50 / c.un, P90: c.u90 / c.un}
	}
	return x
}

// Cells gathers windows into rollup points: per series (its tags) and
// period, a cells field with a record per kind and bin.
type Cells struct {
	m     map[string]*seriesAt
	Every time.Duration
	// Skipped counts windows left out, by reason; Idle those under 0.5
	// running (no cell).
	Skipped map[string]int
	Idle    int
}

type seriesAt struct {
	tags   map[string]string
	period time.Time
	cells  map[string]*cellSum // kind NUL bin index
	pairs  map[Kind][]Pair     // every window's, for each kind's frontier
}

// NewCells gathers cells of periods every long.
func NewCells(every time.Duration) *Cells {
	return &Cells{m: map[string]*seriesAt{}, Every: every, Skipped: map[string]int{}}
}

func seriesID(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var id strings.Builder
	for _, k := range keys {
		id.WriteString(k + "=" + tags[k] + "\x00")
	}
	return id.String()
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
	id := fmt.Sprintf("%d\x00%s", p.Unix(), seriesID(tags))
	s, ok := cs.m[id]
	if !ok {
		s = &seriesAt{tags: tags, period: p, cells: map[string]*cellSum{}, pairs: map[Kind][]Pair{}}
		cs.m[id] = s
	}
	kind := KindOf(w.Tokens, w.PromptTokens)
	if w.SystemTPS.OK && w.PerUserTPS.OK {
		s.pairs[kind] = append(s.pairs[kind], Pair{w.PerUserTPS.V, w.SystemTPS.V, w.Running.V})
	}
	ck := fmt.Sprintf("%s\x00%03d", kind, i)
	c, ok := s.cells[ck]
	if !ok {
		c = &cellSum{}
		s.cells[ck] = c
	}
	c.add(w)
}

// Each hands every series' period, in a stable order, with its tags,
// period start and fields (windows, cells and sketches), to f.
func (cs *Cells) Each(f func(tags map[string]string, period time.Time, fields map[string]any) error) error {
	ids := make([]string, 0, len(cs.m))
	for id := range cs.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s := cs.m[id]
		cks := make([]string, 0, len(s.cells))
		for ck := range s.cells {
			cks = append(cks, ck)
		}
		sort.Strings(cks)
		var recs, sks []string
		var windows float64
		for _, ck := range cks {
			c := s.cells[ck]
			c.close()
			kind, idx, _ := strings.Cut(ck, "\x00")
			i, _ := strconv.Atoi(idx)
			recs = append(recs, c.record(Kind(kind), bins[i].label()))
			sks = append(sks, c.sketchRecord(Kind(kind), bins[i].label()))
			windows += c.w
		}
		for _, kind := range []Kind{Decode, Prompt, Unclassified} {
			if ps := s.pairs[kind]; len(ps) > 0 {
				sks = append(sks, frontierRecord(kind, frontier(ps)))
			}
		}
		fields := map[string]any{schema.FieldWindows: int64(windows), schema.FieldCells: strings.Join(recs, ";"),
			schema.FieldSketches: strings.Join(sks, ";")}
		if err := f(s.tags, s.period, fields); err != nil {
			return err
		}
	}
	return nil
}

// Len is how many points Each hands out.
func (cs *Cells) Len() int { return len(cs.m) }

// Ranged sums rollup points read back over a range, per curve key, kind
// and bin.
type Ranged struct {
	m         map[string]*rangedCell
	frontiers map[string]*rangedFrontier // of sketched points
	// Bad counts cells fields that could not be read.
	Bad int
}

// rangedCell sums a bin's cells over the periods, those that came with
// sketches apart from those that did not.
type rangedCell struct {
	key      Key
	kind     Kind
	bin      string
	sum      cellSum // without sketches
	sketched cellSum // with
}

// NewRanged is an empty Ranged.
func NewRanged() *Ranged {
	return &Ranged{m: map[string]*rangedCell{}, frontiers: map[string]*rangedFrontier{}}
}

// rangedFrontier gathers one curve's frontier points over the periods.
type rangedFrontier struct {
	key   Key
	kind  Kind
	pairs []Pair
}

// Add reads one point's cells field and its sketches field ("" where the
// point has none), of the series tags; a field that cannot be read is
// counted in Bad and returns its error, and nothing of the point is
// taken.
func (r *Ranged) Add(tags map[string]string, cells, sketches string) error {
	if cells == "" {
		return nil
	}
	k := KeyOf(tags)
	type parsed struct {
		kind Kind
		bin  string
		c    *cellSum
	}
	var ps []parsed
	byBin := map[string]*cellSum{}
	for _, rec := range strings.Split(cells, ";") {
		kind, bin, c, err := parseRecord(rec)
		if err != nil {
			r.Bad++
			return err
		}
		ps = append(ps, parsed{kind, bin, c})
		byBin[string(kind)+","+bin] = c
	}
	sketched, fronts, err := readSketches(sketches, byBin)
	if err != nil {
		r.Bad++
		return err
	}
	for _, p := range ps {
		id := strings.Join([]string{k.Host, k.Server, k.Engine, k.Version, k.Model, k.GPUs, string(p.kind), p.bin}, "\x00")
		rc, ok := r.m[id]
		if !ok {
			rc = &rangedCell{key: k, kind: p.kind, bin: p.bin}
			r.m[id] = rc
		}
		if sketched {
			rc.sketched.merge(p.c)
		} else {
			rc.sum.merge(p.c)
		}
	}
	for kind, pairs := range fronts {
		id := strings.Join([]string{k.Host, k.Server, k.Engine, k.Version, k.Model, k.GPUs, string(kind)}, "\x00")
		f, ok := r.frontiers[id]
		if !ok {
			f = &rangedFrontier{key: k, kind: kind}
			r.frontiers[id] = f
		}
		f.pairs = frontier(append(f.pairs, pairs...))
	}
	return nil
}

// readSketches puts a point's sketches on its cells (by "kind,bin"):
// true when every cell has them. It returns the frontier of each kind
// the field holds.
func readSketches(field string, byBin map[string]*cellSum) (bool, map[Kind][]Pair, error) {
	fronts := map[Kind][]Pair{}
	if field == "" {
		return false, fronts, nil
	}
	seen := 0
	for _, rec := range strings.Split(field, ";") {
		p := strings.Split(rec, ",")
		if p[0] != string(Decode) && p[0] != string(Prompt) && p[0] != string(Unclassified) {
			return false, nil, fmt.Errorf("curve sketch %q: kind %q unknown", rec, p[0])
		}
		if len(p) == 3 && p[1] == frontierBin {
			ps, err := parseFrontier(p[2])
			if err != nil {
				return false, nil, fmt.Errorf("curve sketch %q: %w", rec, err)
			}
			fronts[Kind(p[0])] = ps
			continue
		}
		if len(p) != 4 {
			return false, nil, fmt.Errorf("curve sketch %q: %d parts, want 4", rec, len(p))
		}
		c := byBin[p[0]+","+p[1]]
		if c == nil {
			return false, nil, fmt.Errorf("curve sketch %q: no cell of that kind and bin", rec)
		}
		var err error
		if c.sysSk, err = parseSketch(p[2]); err != nil {
			return false, nil, err
		}
		if c.userSk, err = parseSketch(p[3]); err != nil {
			return false, nil, err
		}
		seen++
	}
	return seen == len(byBin), fronts, nil
}

// Into puts the summed cells on b's curves.
func (r *Ranged) Into(b *Builder) {
	ids := make([]string, 0, len(r.m))
	for id := range r.m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		rc := r.m[id]
		if rc.sum.w > 0 {
			b.AddCell(rc.sum.cell(rc.key, rc.kind, rc.bin))
		}
		if rc.sketched.w > 0 {
			x := rc.sketched.cell(rc.key, rc.kind, rc.bin)
			x.sketched = true
			b.AddCell(x)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(r.frontiers)) {
		f := r.frontiers[id]
		c := b.curve(f.key, f.kind)
		c.pairs = append(c.pairs, f.pairs...)
	}
	if r.Bad > 0 {
		b.Skipped[SkipBadCell] += r.Bad
	}
}
