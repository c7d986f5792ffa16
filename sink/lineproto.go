// Package sink delivers joined points: encoded as InfluxDB line protocol,
// written to a file or stdout, or sent to InfluxDB.
package sink

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/influxdata/influxdb-client-go/v2/api/write"
	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
)

// Precision of the timestamps tpsmon writes. Window starts are whole
// seconds in practice; milliseconds leave room for sub-second windows.
const Precision = time.Millisecond

// Encoder turns points into line protocol, one line per point, with
// sorted tags and fields and millisecond timestamps. It uses influxdata's
// validating encoder: a point it cannot write exactly is an error, never
// a line InfluxDB refuses or misreads.
type Encoder struct {
	enc     lineprotocol.Encoder
	scratch []byte
	// A window's tags and fields, reused from point to point.
	tags   []Tag
	fields fields
	// profile is how window fields are written; numeric holds a
	// window's fields in ProfileNumeric.
	profile Profile
	numeric fields
}

// SetProfile sets how windows' fields are written (ProfileInflux unless
// set). Points given to Append are written as they are.
func (e *Encoder) SetProfile(p Profile) { e.profile = p }

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.enc.SetPrecision(lineprotocol.Millisecond)
	return e
}

// Append encodes p and appends its line to dst. A point that cannot be
// encoded (a NaN or infinite field, a time out of range) leaves dst as it
// was.
func (e *Encoder) Append(dst []byte, p Point) ([]byte, error) {
	e.start(p.Measurement, p.Tags)
	for _, f := range p.Fields {
		v, ok := fieldValue(f.Value)
		if !ok {
			return dst, badField(p.Measurement, p.Time, f.Key, f.Value)
		}
		e.enc.AddField(f.Key, v)
	}
	return e.end(dst, p.Measurement, p.Time)
}

// appendTyped encodes a window's point from its tags and typed fields, as
// Append encodes the Point they make, without building it.
func (e *Encoder) appendTyped(dst []byte, measurement string, tags []Tag, fs fields, t time.Time) ([]byte, error) {
	// The measurement and keys are schema's, in order, and start makes
	// every tag value one line protocol carries (TagValue): the library's
	// checks of them would find nothing, at 3-8 ms of a 30,000-window
	// replay (bench/HISTORY.md, round 6). TestWindowsEncodeAsTheirPoints
	// holds the lines and errors to what the checking encoder makes of the
	// same points.
	e.enc.SetLax(true)
	defer e.enc.SetLax(false)
	e.start(measurement, tags)
	for _, f := range fs {
		v, ok := f.lineValue()
		if !ok {
			return dst, badField(measurement, t, f.key, f.value())
		}
		e.enc.AddField(f.key, v)
	}
	return e.end(dst, measurement, t)
}

// appendWindow encodes the points of one closed window, as Append encodes
// Points(c), and appends the lines it could encode to dst; the error is
// the first point's that could not be.
func (e *Encoder) appendWindow(dst []byte, c *analysis.Closed) ([]byte, error) {
	var first error
	keep := func(b []byte, err error) {
		dst = b
		if err != nil && first == nil {
			first = err
		}
	}
	for i := range c.GPUs {
		g := &c.GPUs[i]
		e.tags, e.fields = gpuTags(e.tags[:0], *g), gpuFields(e.fields[:0], *g)
		keep(e.appendProfile(dst, schema.GPU, g.Start))
	}
	for i := range c.Servers {
		s := &c.Servers[i]
		e.tags, e.fields = serverTags(e.tags[:0], *s), serverFields(e.fields[:0], *s)
		keep(e.appendProfile(dst, schema.Server, s.Start))
	}
	return dst, first
}

// appendProfile encodes the window point in e.tags and e.fields in e's
// profile.
func (e *Encoder) appendProfile(dst []byte, measurement string, t time.Time) ([]byte, error) {
	if e.profile != ProfileNumeric {
		return e.appendTyped(dst, measurement, e.tags, e.fields, t)
	}
	var err error
	if e.numeric, err = numeric(e.numeric[:0], e.fields); err != nil {
		return dst, fmt.Errorf("encode %s point at %s: %w", measurement, t.UTC().Format(time.RFC3339), err)
	}
	return e.appendTyped(dst, measurement, e.tags, e.numeric, t)
}

// start begins a line in the scratch buffer with its measurement and tags.
func (e *Encoder) start(measurement string, tags []Tag) {
	e.enc.SetBuffer(e.scratch[:0])
	e.enc.StartLine(measurement)
	for _, t := range tags {
		// An empty tag is no tag: InfluxDB reads a missing tag as "".
		if v := TagValue(t.Value); v != "" {
			e.enc.AddTag(t.Key, v)
		}
	}
}

// end ends the line at t and appends it to dst, unless it failed.
func (e *Encoder) end(dst []byte, measurement string, t time.Time) ([]byte, error) {
	e.enc.EndLine(t)
	e.scratch = e.enc.Bytes()
	if err := e.enc.Err(); err != nil {
		return dst, fmt.Errorf("encode %s point at %s: %w", measurement, t.UTC().Format(time.RFC3339), err)
	}
	return append(dst, e.scratch...), nil
}

func badField(measurement string, t time.Time, key string, v any) error {
	return fmt.Errorf("encode %s point at %s: field %s: %v is not a finite number, an integer, a bool or a string",
		measurement, t.UTC().Format(time.RFC3339), key, v)
}

// AppendWrite encodes a point built with influxdb-client-go (rollups,
// simulated fleets) like Append.
func (e *Encoder) AppendWrite(dst []byte, p *write.Point) ([]byte, error) {
	pt := Point{Measurement: p.Name(), Time: p.Time(), Tags: make([]Tag, 0, len(p.TagList())),
		Fields: make([]Field, 0, len(p.FieldList()))}
	for _, t := range p.TagList() {
		pt.Tags = append(pt.Tags, Tag{t.Key, t.Value})
	}
	for _, f := range p.FieldList() {
		pt.Fields = append(pt.Fields, Field{f.Key, f.Value})
	}
	pt.Tags = sortedTags(pt.Tags)
	return e.Append(dst, pt)
}

// lineValue is the field's value as fieldValue makes it of value().
func (t typed) lineValue() (lineprotocol.Value, bool) {
	switch t.kind {
	case 'f':
		return lineprotocol.FloatValue(t.f)
	case 'i':
		return lineprotocol.IntValue(t.i), true
	}
	return lineprotocol.StringValue(StringValue(t.s))
}

func fieldValue(x any) (lineprotocol.Value, bool) {
	if s, ok := x.(string); ok {
		return lineprotocol.StringValue(StringValue(s))
	}
	return lineprotocol.NewValue(x)
}

// TagValue is what tpsmon stores for a tag value: line protocol cannot
// carry every string in a tag, so a label from a server's page or a name
// from the configuration is normalised first. Invalid UTF-8 becomes
// U+FFFD, control characters (newlines, tabs) become spaces, and a
// trailing backslash, which would escape the separator after it, becomes
// U+FF3C (＼). A value longer than MaxTagBytes is cut (cutTag).
// Everything else (quotes, commas, '=', spaces, inner backslashes) is
// kept exactly. TagValue(TagValue(s)) is TagValue(s).
func TagValue(s string) string {
	s = StringValue(s)
	if n := len(s) - len(strings.TrimRight(s, `\`)); n > 0 {
		s = s[:len(s)-n] + strings.Repeat("＼", n)
	}
	if len(s) > MaxTagBytes {
		s = cutTag(s)
	}
	return s
}

// MaxTagBytes bounds a tag value as tpsmon stores it. InfluxDB 1.8
// refuses a point whose series key (measurement, tags), "#!~#" and a
// field key come to more than 65,535 bytes ("max key length exceeded",
// found against influxd 1.8.10; it has no bound of its own for one tag
// value), and a label of a server's page (model_name) can be that long.
// Five tags at this bound stay far below it, and no name tpsmon meets
// honestly comes near it (a model path, a GPU list).
const MaxTagBytes = 256

// cutSep separates the kept prefix of a cut tag value from its hash.
const cutSep = "…"

// cutTag cuts a tag value longer than MaxTagBytes to MaxTagBytes: the
// longest prefix of whole characters that leaves room, "…", and 16 hex
// digits of the SHA-256 of the whole value, so that the same value is
// always cut the same way and long values that differ anywhere stay
// distinct series.
func cutTag(s string) string {
	sum := sha256.Sum256([]byte(s))
	keep := MaxTagBytes - len(cutSep) - 16
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + cutSep + hex.EncodeToString(sum[:8])
}

// StringValue is what tpsmon stores for a string field: InfluxDB 1.x
// reads no escape but \" and \\ in a string field, so control characters
// become spaces; invalid UTF-8 becomes U+FFFD.
func StringValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexFunc(s, unicode.IsControl) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
