// Package curve turns server windows into the operating curve: system
// and per-user tokens per second against concurrency, per server and per
// model, engine and GPU set, and from it the operating point and headroom
// under a per-user floor. It is pure: windows (or rollup cells) in, curves
// out, with the facts it needs (the floor) passed in.
//
// Rules (README "Operating curve"):
//   - A window's concurrency is its mean running requests, rounded to the
//     nearest integer (half up): bin 4 holds [3.5, 4.5). Windows under 0.5
//     running are idle and outside the curve (counted). Above 8 the bins
//     widen, each about 1.5x or 1.33x the one before (9-12, 13-16, 17-24,
//     25-32, ... 385-512, 513+), on the rounded value too.
//   - A window is prompt-heavy when its prompt tokens are at least its
//     output tokens, decode-heavy otherwise, unclassified without a prompt
//     count: the three are separate curves (prefill takes the step time
//     output tokens would have had), and so are windows of another model,
//     engine, engine version (unknown: a curve of its own) or GPU set.
//   - Each bin's means are exact and add across periods: system TPS per
//     observed second (its windows' tokens over their seconds), per-user
//     TPS per stream-second (each window weighted by running requests
//     times its observed seconds), what a benchmark's per-level table
//     computes (MeansDefinition).
//   - The operating point uses each bin's median per-user TPS (and system
//     TPS there), and only bins of at least MinWindows windows: a median
//     stays put where one window of a drain (half a level's rate at half
//     its running) or a warm-up moves the mean by 9 % (the sweep's bin 2).
package curve

import (
	"fmt"
	"math"
)

// Bin is one range of rounded mean running requests: [Lo, Hi] inclusive
// integers (Hi 0: open above).
type binDef struct {
	lo, hi int
}

// bins are the concurrency bins: 1..8 each, then wider.
var bins = func() []binDef {
	var out []binDef
	for i := 1; i <= 8; i++ {
		out = append(out, binDef{i, i})
	}
	edges := []int{8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512}
	for i := 1; i < len(edges); i++ {
		out = append(out, binDef{edges[i-1] + 1, edges[i]})
	}
	return append(out, binDef{513, 0})
}()

func (b binDef) label() string {
	switch {
	case b.hi == 0:
		return fmt.Sprintf("%d+", b.lo)
	case b.lo == b.hi:
		return fmt.Sprintf("%d", b.lo)
	}
	return fmt.Sprintf("%d-%d", b.lo, b.hi)
}

// BinLabels lists the bins' labels in order: what the rollups' running_bin
// tag holds.
func BinLabels() []string {
	out := make([]string, len(bins))
	for i, b := range bins {
		out[i] = b.label()
	}
	return out
}

// BinOf is the index of the bin of a mean running count, -1 for an idle
// window (under 0.5). The caller has checked running is a number >= 0.
func BinOf(running float64) int {
	r := int(math.Floor(running + 0.5))
	if r < 1 {
		return -1
	}
	for i, b := range bins {
		if b.hi == 0 || r <= b.hi {
			return i
		}
	}
	return len(bins) - 1
}

// binIndex is the index of a bin label, -1 when it names none.
func binIndex(label string) int {
	for i, b := range bins {
		if b.label() == label {
			return i
		}
	}
	return -1
}

// Kind tells prompt-heavy windows from decode-heavy ones.
type Kind string

// Kinds of windows.
const (
	Decode       Kind = "decode"
	Prompt       Kind = "prompt"
	Unclassified Kind = "unclassified"
)

// KindOf classifies a window by its prompt and output tokens: prompt-heavy
// when prompt >= output (and some prompt), unclassified without a prompt
// count.
func KindOf(tokens, prompt Opt) Kind {
	if !prompt.OK || !tokens.OK {
		return Unclassified
	}
	if prompt.V > 0 && prompt.V >= tokens.V {
		return Prompt
	}
	return Decode
}
