package logline

import (
	"fmt"
	"strings"
)

// SkipReason says why a line that looked like a throughput line was not
// read. The set is fixed and small: it is a label of
// tpsmon_log_lines_skipped_total.
type SkipReason uint8

const (
	// SkipUnparsed: the line holds an engine's marker, but not a layout
	// of its lines tpsmon knows (a new version's format).
	SkipUnparsed SkipReason = iota
	// SkipBadNumber: the layout, but a number in it does not read ("1.2.3").
	SkipBadNumber
	// SkipTooLong: the line was cut at the longest tpsmon keeps, before
	// its figures.
	SkipTooLong
	// SkipPadded: the line's only token count includes CUDA-graph padding
	// (TensorRT-LLM's iteration line before num_scheduled_requests).
	SkipPadded
	// NumSkipReasons is the number of reasons.
	NumSkipReasons
)

var skipNames = [NumSkipReasons]string{"unparsed", "bad_number", "too_long", "padded"}

func (r SkipReason) String() string {
	if r < NumSkipReasons {
		return skipNames[r]
	}
	return fmt.Sprintf("SkipReason(%d)", r)
}

// maxSkipLine is how much of a skipped line is told.
const maxSkipLine = 200

// Skip is the first line of a log that was not read, and why.
type Skip struct {
	Engine string // the format whose marker the line holds
	Reason SkipReason
	Line   string // its first maxSkipLine bytes, whole characters
}

// String says what was skipped, in the words the daemon's log and replay's
// warnings both use.
func (s Skip) String() string {
	return fmt.Sprintf("a %s line tpsmon cannot read (%s), counted and skipped: %q", s.Engine, s.Reason, s.Line)
}

// skip counts a line not read; the first one is kept to be told.
func (p *Parser) skip(reason SkipReason, engine string, line []byte) {
	if reason == SkipUnparsed && p.maxLine > 0 && len(line) >= p.maxLine {
		reason = SkipTooLong
	}
	p.Skipped++
	p.SkippedBy[reason]++
	if p.FirstSkip != nil {
		return
	}
	cut := line[:min(len(line), maxSkipLine)]
	p.FirstSkip = &Skip{Engine: engine, Reason: reason, Line: strings.ToValidUTF8(string(cut), "")}
}
