package curve

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/schema"
)

func TestBinOf(t *testing.T) {
	for _, c := range []struct {
		running float64
		want    string // "" idle
	}{
		{0, ""}, {0.49, ""}, {0.5, "1"}, {1.49, "1"}, {1.5, "2"}, {3.99, "4"}, {4.5, "5"},
		{8.49, "8"}, {8.5, "9-12"}, {12.49, "9-12"}, {12.5, "13-16"}, {24.4, "17-24"}, {24.5, "25-32"},
		{512.4, "385-512"}, {512.5, "513+"}, {1e5, "513+"},
	} {
		got := ""
		if i := BinOf(c.running); i >= 0 {
			got = bins[i].label()
		}
		if got != c.want {
			t.Errorf("BinOf(%v) = %q, want %q", c.running, got, c.want)
		}
	}
	// Every integer from 1 up has exactly one bin, in order.
	last := 0
	for r := 1; r < 2000; r++ {
		i := BinOf(float64(r))
		if i < last || i > last+1 {
			t.Fatalf("running %d in bin %d after bin %d", r, i, last)
		}
		last = i
	}
}

func TestKindOf(t *testing.T) {
	for _, c := range []struct {
		tokens, prompt Opt
		want           Kind
	}{
		{Some(100), Some(99), Decode},
		{Some(100), Some(100), Prompt},
		{Some(100), Some(101), Prompt},
		{Some(0), Some(0), Decode},
		{Some(0), Some(5), Prompt},
		{Some(100), Opt{}, Unclassified},
		{Opt{}, Some(5), Unclassified},
	} {
		if got := KindOf(c.tokens, c.prompt); got != c.want {
			t.Errorf("KindOf(%v, %v) = %s, want %s", c.tokens, c.prompt, got, c.want)
		}
	}
}

func win(running, sys, user float64) Window {
	return Window{Key: Key{Host: "h", Server: "s"}, Seconds: 10, GPUs: 2, Running: Some(running),
		SystemTPS: Some(sys), PerUserTPS: Some(user), Tokens: Some(sys * 10), PromptTokens: Some(1)}
}

func TestAddRefusesAbsurdWindows(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		name string
		w    Window
		want string
	}{
		{"fine", win(2, 100, 50), ""},
		{"idle", win(0.2, 0, 0), ""},
		{"no running", Window{SystemTPS: Some(1)}, SkipNoRunning},
		{"NaN running", win(nan, 1, 1), SkipBadRunning},
		{"negative running", win(-1, 1, 1), SkipBadRunning},
		{"huge running", win(2e6, 1, 1), SkipBadRunning},
		{"NaN rate", win(2, nan, 1), SkipBadRate},
		{"negative rate", win(2, 1, -1), SkipBadRate},
		{"huge rate", win(2, 2e7, 1), SkipBadRate},
		{"Inf rate", win(2, math.Inf(1), 1), SkipBadRate},
		{"rate at the bound", win(2, 1e7, 1), ""},
		{"negative seconds", func() Window { w := win(2, 1, 1); w.Seconds = -10; return w }(), SkipBadSeconds},
		{"NaN seconds", func() Window { w := win(2, 1, 1); w.Seconds = nan; return w }(), SkipBadSeconds},
		{"negative prompt", func() Window { w := win(2, 1, 1); w.PromptTokens = Some(-1); return w }(), SkipBadRate},
	} {
		b := NewBuilder()
		if got := b.Add(c.w); got != c.want {
			t.Errorf("%s: Add = %q, want %q", c.name, got, c.want)
		}
		if c.want != "" && b.Skipped[c.want] != 1 {
			t.Errorf("%s: skipped %v", c.name, b.Skipped)
		}
		if c.want != "" && len(b.Curves(Options{})) != 0 {
			t.Errorf("%s: a refused window made a curve", c.name)
		}
	}
}

func TestQuantileIsNumpyLinear(t *testing.T) {
	d := dist{{4, 1}, {1, 1}, {3, 1}, {2, 1}}
	// numpy.percentile([1,2,3,4], [10,50,90]) = 1.3, 2.5, 3.7
	for q, want := range map[float64]float64{0.1: 1.3, 0.5: 2.5, 0.9: 3.7, 0: 1, 1: 4} {
		if got := d.quantile(q); math.Abs(got-want) > 1e-12 {
			t.Errorf("q%v = %v, want %v", q, got, want)
		}
	}
	// Weights count as repeated windows.
	w := dist{{1, 2}, {5, 1}}
	e := dist{{1, 1}, {1, 1}, {5, 1}}
	for _, q := range []float64{0.1, 0.5, 0.75, 0.9} {
		if a, b := w.quantile(q), e.quantile(q); a != b {
			t.Errorf("weighted q%v = %v, expanded %v", q, a, b)
		}
	}
}

// sweep is a server whose per-user TPS falls as concurrency rises: 5
// windows at each of 1, 2, 4, 8 and 16 running.
func sweep(b *Builder) {
	for _, lv := range []struct{ running, user float64 }{{1, 100}, {2, 90}, {4, 70}, {8, 40}, {16, 15}} {
		for i := 0; i < 5; i++ {
			j := float64(i-2) * 0.01 // a spread around the level
			b.Add(win(lv.running+j, lv.running*lv.user*(1+j), lv.user*(1+j)))
		}
	}
}

func TestOperatingPoint(t *testing.T) {
	for _, c := range []struct {
		name      string
		floor     float64
		met, knee bool
		running   string
		sys       float64
		above     string
	}{
		{"knee between 4 and 8", 50, true, true, "4", 280, ""},
		{"exactly at the median meets it", 40, true, true, "8", 320, ""},
		{"just above the median does not", 40.0001, true, true, "4", 280, ""},
		{"floor met everywhere: knee not observed", 10, true, false, "13-16", 240, "13-16"},
		{"floor met nowhere", 200, false, true, "", 0, ""},
	} {
		b := NewBuilder()
		sweep(b)
		cs := b.Curves(Options{Floor: c.floor})
		if len(cs) != 1 {
			t.Fatalf("%s: %d curves", c.name, len(cs))
		}
		op := cs[0].Operating
		if op.Met != c.met || op.KneeObserved != c.knee || op.Running != c.running || op.NotObservedAbove != c.above {
			t.Errorf("%s: %+v", c.name, op)
			continue
		}
		if !c.met {
			if !strings.Contains(op.Note, "not met at any concurrency seen in 3 windows or more") {
				t.Errorf("%s: note %q", c.name, op.Note)
			}
			continue
		}
		if math.Abs(*op.SystemTPS-c.sys) > 1e-9 {
			t.Errorf("%s: system %v, want %v", c.name, *op.SystemTPS, c.sys)
		}
		// The range's median system TPS is the middle of the 25 windows:
		// the 16-running level's (16 × 15 = 240).
		if h := *op.Headroom; math.Abs(h-c.sys/240) > 1e-9 {
			t.Errorf("%s: headroom %v, want %v", c.name, h, c.sys/240)
		}
		if !c.knee && !strings.Contains(op.Note, "knee not observed above concurrency 13-16") {
			t.Errorf("%s: note %q", c.name, op.Note)
		}
	}
}

func TestThinBinsDoNotDecide(t *testing.T) {
	b := NewBuilder()
	sweep(b)
	// Two windows at 32 running that would meet the floor: too few.
	b.Add(win(32, 3200, 100))
	b.Add(win(32, 3200, 100))
	c := b.Curves(Options{Floor: 50})[0]
	if op := c.Operating; op.Running != "4" || !op.KneeObserved {
		t.Errorf("thin bin decided: %+v", op)
	}
	last := c.Bins[len(c.Bins)-1]
	if last.Running != "25-32" || !last.Thin || last.Windows != 2 {
		t.Errorf("last bin %+v", last)
	}
	// With MinWindows 2 it counts.
	c = b.Curves(Options{Floor: 50, MinWindows: 2})[0]
	if op := c.Operating; op.Running != "25-32" || op.KneeObserved {
		t.Errorf("MinWindows 2: %+v", op)
	}
}

func TestBinsStats(t *testing.T) {
	b := NewBuilder()
	sweep(b)
	b.Add(win(0.1, 0, 0)) // idle
	c := b.Curves(Options{})[0]
	if b.Idle != 1 || c.Windows != 25 || len(c.Bins) != 5 || c.Operating != nil {
		t.Fatalf("idle %d, windows %d, bins %d, op %v", b.Idle, c.Windows, len(c.Bins), c.Operating)
	}
	four := c.Bins[2]
	if four.Running != "4" || four.Windows != 5 || math.Abs(four.GPUHours-5*10*2/3600.0) > 1e-12 {
		t.Errorf("bin 4: %+v", four)
	}
	// per-user 70 × (0.98, 0.99, 1, 1.01, 1.02): p10 = 70 × 0.984; the
	// mean per stream-second weighs each by its running 4 + j:
	// 70 × Σ(1+j)(4+j) / Σ(4+j) = 70 × (1 + Σj²/20).
	if u := four.PerUserTPS; math.Abs(u.P50-70) > 1e-9 || math.Abs(u.P10-70*0.984) > 1e-9 || math.Abs(u.P90-70*1.016) > 1e-9 || math.Abs(*u.Mean-70*(1+0.001/20)) > 1e-9 {
		t.Errorf("bin 4 per-user %+v", u)
	}
	if c.Exactness != "exact" {
		t.Errorf("exactness %q", c.Exactness)
	}
}

func TestCurvesApart(t *testing.T) {
	b := NewBuilder()
	w := win(2, 100, 50)
	b.Add(w)
	w.Key.Model = "other"
	b.Add(w)
	w.Key.GPUs = "0,1"
	b.Add(w)
	w.Key.Engine = "vllm"
	b.Add(w)
	w.PromptTokens = Some(2000) // prompt-heavy
	b.Add(w)
	w.PromptTokens = Opt{}
	b.Add(w)
	cs := b.Curves(Options{})
	if len(cs) != 6 {
		t.Fatalf("%d curves, want 6", len(cs))
	}
	kinds := map[Kind]int{}
	for _, c := range cs {
		kinds[c.Kind]++
	}
	if kinds[Prompt] != 1 || kinds[Unclassified] != 1 || kinds[Decode] != 4 {
		t.Errorf("kinds %v", kinds)
	}
}

func TestFrontier(t *testing.T) {
	ps := []Pair{{100, 100, 1}, {90, 180, 2}, {95, 150, 2}, {80, 170, 2}, {50, 400, 8}, {60, 300, 4}, {50, 350, 8}}
	got := frontier(ps)
	want := []Pair{{100, 100, 1}, {95, 150, 2}, {90, 180, 2}, {60, 300, 4}, {50, 400, 8}}
	if len(got) != len(want) {
		t.Fatalf("frontier %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("frontier[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestCells(t *testing.T) {
	// Cells of one period each give the windows' quantiles exactly: the
	// rollup of a sweep whose levels each lie in one hour is its curve.
	exact := NewBuilder()
	sweep(exact)
	want := exact.Curves(Options{Floor: 50})[0]
	cs := NewCells(time.Hour)
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tags := map[string]string{schema.TagHost: "h", schema.TagServer: "s"}
	k := 0
	for _, lv := range []struct{ running, user float64 }{{1, 100}, {2, 90}, {4, 70}, {8, 40}, {16, 15}} {
		for i := 0; i < 5; i++ {
			j := float64(i-2) * 0.01
			cs.Add(tags, start.Add(time.Duration(k)*time.Hour+time.Duration(i)*time.Minute), win(lv.running+j, lv.running*lv.user*(1+j), lv.user*(1+j)))
		}
		k++
	}
	cs.Add(tags, start, win(0.1, 0, 0))
	cs.Add(tags, start, win(math.NaN(), 0, 0))
	if cs.Len() != 5 || cs.Idle != 1 || cs.Skipped[SkipBadRunning] != 1 {
		t.Fatalf("%d points, idle %d, skipped %v", cs.Len(), cs.Idle, cs.Skipped)
	}
	r := NewRanged()
	err := cs.Each(func(tags map[string]string, period time.Time, fields map[string]any) error {
		if period.Minute() != 0 || tags[schema.TagHost] != "h" || fields[schema.FieldWindows] != int64(5) {
			t.Errorf("point at %v tagged %v: %v", period, tags, fields)
		}
		return r.Add(tags, fields[schema.FieldCells].(string), "")
	})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder()
	r.Into(b)
	got := b.Curves(Options{Floor: 50})[0]
	if got.Exactness != RollupExactness || len(got.Bins) != len(want.Bins) {
		t.Fatalf("cells: %+v", got)
	}
	for i := range want.Bins {
		g, w := got.Bins[i], want.Bins[i]
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Abs(b) } // seven digits
		if g.Windows != w.Windows || !near(g.GPUHours, w.GPUHours) || !near(*g.SystemTPS.Mean, *w.SystemTPS.Mean) || !near(*g.PerUserTPS.Mean, *w.PerUserTPS.Mean) ||
			!near(g.SystemTPS.P50, w.SystemTPS.P50) || !near(g.PerUserTPS.P10, w.PerUserTPS.P10) || !near(g.PerUserTPS.P90, w.PerUserTPS.P90) {
			t.Errorf("bin %s: %+v %+v, want %+v %+v", w.Running, g, *g.PerUserTPS, w, *w.PerUserTPS)
		}
	}
	if got.Operating.Running != want.Operating.Running || len(got.Frontier) == 0 {
		t.Errorf("operating point %s, windows say %s; frontier %v", got.Operating.Running, want.Operating.Running, got.Frontier)
	}
	for _, bad := range []string{
		"decode,4,1,2,3", // too few parts
		"decode,4,1,0,1,1,1,1,1,1,1,1,1,,,,1,1,1",    // 19 parts
		"decode,4,1,0,1,1,1,1,1,1,1,1,1,,,,1,-1,1,1", // a negative sum
		"mixed,4,1,0,1,1,1,1,1,1,1,1,1,,,",           // no such kind
		"decode,7-9,1,0,1,1,1,1,1,1,1,1,1,,,",        // no such bin
		"decode,4,NaN,0,1,1,1,1,1,1,1,1,1,,,",        // not a number
		"decode,4,1,-2,1,1,1,1,1,1,1,1,1,,,",         // negative
		"decode,4,1,0,1,1,1,1,1,1,1,1,1,,,;x",        // a bad record after a good one
	} {
		r := NewRanged()
		if err := r.Add(map[string]string{schema.TagHost: "h"}, bad, ""); err == nil || r.Bad != 1 {
			t.Errorf("cells %q taken (%v)", bad, err)
		}
		b := NewBuilder()
		r.Into(b)
		if b.Skipped[SkipBadCell] != 1 || len(b.Curves(Options{})) != 0 {
			t.Errorf("cells %q: skipped %v", bad, b.Skipped)
		}
	}
}

// TestMeans holds a bin's means to what a benchmark's per-level table
// computes over the same windows: tokens over observed seconds, and the
// per-user speed of each stream-second; exact through rollup cells, and
// absent, never partial, where a weight is unknown.
func TestMeans(t *testing.T) {
	w := func(secs, cov, running, sys, user float64) Window {
		x := win(running, sys, user)
		x.Seconds = secs
		if cov >= 0 {
			x.Coverage = Some(cov)
		}
		return x
	}
	for _, c := range []struct {
		name      string
		ws        []Window
		sys, user float64 // NaN: absent
	}{
		{"one window", []Window{w(10, -1, 2, 100, 50)}, 100, 50},
		// 1000 + 1500 tokens over 15 s; per-user (50·2·10 + 80·2.4·5) / (20 + 12).
		{"coverage and running weigh", []Window{w(10, -1, 2, 100, 50), w(10, 0.5, 2.4, 300, 80)}, 2500.0 / 15, 1960.0 / 32},
		{"lengths weigh", []Window{w(5, 1, 2, 100, 50), w(15, 1, 2, 200, 40)}, 3500.0 / 20, (500.0 + 1200) / 40},
		{"a window of unknown length", []Window{w(10, -1, 2, 100, 50), w(0, -1, 2, 300, 80)}, math.NaN(), math.NaN()},
	} {
		b := NewBuilder()
		cs := NewCells(time.Hour)
		at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		tags := map[string]string{schema.TagHost: "h", schema.TagServer: "s"}
		for i, x := range c.ws {
			b.Add(x)
			// A period per window: the cells' means add across periods.
			cs.Add(tags, at.Add(time.Duration(i)*time.Hour), x)
		}
		r := NewRanged()
		if err := cs.Each(func(tags map[string]string, _ time.Time, f map[string]any) error {
			return r.Add(tags, f[schema.FieldCells].(string), "")
		}); err != nil {
			t.Fatal(err)
		}
		rb := NewBuilder()
		r.Into(rb)
		for from, b := range map[string]*Builder{"windows": b, "cells": rb} {
			bn := b.Curves(Options{})[0].Bins[0]
			for _, m := range []struct {
				what string
				got  *float64
				want float64
			}{{"system", bn.SystemTPS.Mean, c.sys}, {"per-user", bn.PerUserTPS.Mean, c.user}} {
				if math.IsNaN(m.want) != (m.got == nil) || m.got != nil && math.Abs(*m.got-m.want) > 1e-6*m.want {
					t.Errorf("%s, from %s: %s mean %v, want %v", c.name, from, m.what, m.got, m.want)
				}
			}
		}
	}
	// A cell written before the means (16 parts) leaves the range's mean
	// absent, not over the other periods.
	r := NewRanged()
	tags := map[string]string{schema.TagHost: "h", schema.TagServer: "s"}
	for _, rec := range []string{"decode,2,1,20,2,1,100,100,100,1,50,50,50,100,50,2", "decode,2,1,20,2,1,100,100,100,1,50,50,50,100,50,2,10,1000,20,1000"} {
		if err := r.Add(tags, rec, ""); err != nil {
			t.Fatal(err)
		}
	}
	b := NewBuilder()
	r.Into(b)
	if bn := b.Curves(Options{})[0].Bins[0]; bn.Windows != 2 || bn.SystemTPS.Mean != nil || bn.PerUserTPS.Mean != nil || bn.SystemTPS.P50 != 100 {
		t.Errorf("old and new cells: %+v %+v", bn, *bn.SystemTPS)
	}
}
