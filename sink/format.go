package sink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/window"
)

// LPWriter writes line protocol.
type LPWriter struct {
	w   io.Writer
	enc *Encoder
	buf []byte
}

// NewLPWriter writes line protocol to w.
func NewLPWriter(w io.Writer) *LPWriter { return &LPWriter{w: w, enc: NewEncoder()} }

// SetProfile sets how the windows' fields are written.
func (o *LPWriter) SetProfile(p Profile) { o.enc.SetProfile(p) }

// lpChunk is how much line protocol LPWriter holds before it writes: a
// replay's many windows go out in pieces rather than as one buffer grown
// (and copied) to the size of the whole output.
const lpChunk = 64 << 10

// WriteWindows writes the points of cs; a point that cannot be encoded is
// reported, the others still go out.
func (o *LPWriter) WriteWindows(cs []analysis.Closed) error {
	var first error
	b := o.buf[:0]
	for i := range cs {
		var err error
		if b, err = o.enc.appendWindow(b, &cs[i]); err != nil && first == nil {
			first = err
		}
		if len(b) >= lpChunk || i == len(cs)-1 {
			if _, werr := o.w.Write(b); werr != nil {
				return werr
			}
			b = b[:0]
		}
	}
	o.buf = b
	return first
}

// JSONWriter writes one JSON object per point (design §7).
type JSONWriter struct{ enc *json.Encoder }

// NewJSONWriter writes JSON points to w.
func NewJSONWriter(w io.Writer) *JSONWriter { return &JSONWriter{enc: json.NewEncoder(w)} }

// JSONPoint is one point as JSONWriter writes it.
type JSONPoint struct {
	Measurement string            `json:"measurement"`
	Time        string            `json:"time"`
	Tags        map[string]string `json:"tags"`
	Fields      map[string]any    `json:"fields"`
}

// WriteWindows writes one line per point of cs.
func (o *JSONWriter) WriteWindows(cs []analysis.Closed) error {
	for _, p := range Points(cs) {
		jp := JSONPoint{Measurement: p.Measurement, Time: p.Time.UTC().Format(time.RFC3339Nano),
			Tags: p.TagMap(), Fields: p.FieldMap()}
		if err := o.enc.Encode(jp); err != nil {
			return err
		}
	}
	return nil
}

// TableWriter prints one row per server window, with its GPUs summed up,
// for a person at a terminal.
type TableWriter struct {
	w      io.Writer
	header bool
}

// NewTableWriter prints a table on w.
func NewTableWriter(w io.Writer) *TableWriter { return &TableWriter{w: w} }

// WriteWindows prints the servers' windows of cs, a header first.
func (o *TableWriter) WriteWindows(cs []analysis.Closed) error {
	if !o.header {
		fmt.Fprintf(o.w, "%-8s  %-10s %-13s %7s %9s %9s %7s %7s %5s %6s %7s %7s %5s\n",
			"window", "server", "state", "tokens", "sys tok/s", "user tok/s", "running", "waiting", "kv%", "gpu%", "power W", "tok/J", "cov")
		o.header = true
	}
	for _, c := range cs {
		for _, w := range c.Servers {
			fmt.Fprintf(o.w, "%-8s  %-10s %-13s %7s %9s %9s %7s %7s %5s %6s %7s %7s %5s\n",
				w.Start.Local().Format("15:04:05"), w.Server, w.State,
				intCell(w.Tokens), cell(w.SystemTPS, 1, 1), cell(w.PerUserTPS, 1, 1),
				cell(w.Running, 1, 1), cell(w.Waiting, 1, 1), cell(w.KVCacheUsage, 100, 0),
				cell(w.GPUUtil, 1, 0), cell(w.PowerW, 1, 0), cell(w.TokensPerJoule, 1, 2),
				cell(window.Some(w.Coverage), 1, 2))
		}
	}
	return nil
}

// cell formats v scaled, or "-" when it is absent.
func cell(v window.Opt[float64], scale float64, prec int) string {
	if !v.OK {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v.V*scale)
}

// intCell formats v, or "-" when it is absent.
func intCell(v window.Opt[int64]) string {
	if !v.OK {
		return "-"
	}
	return fmt.Sprintf("%d", v.V)
}

// SpoolWriter encodes points into the spool and wakes the sender that
// drains it into InfluxDB.
type SpoolWriter struct {
	Spool  *spool.Spool
	Sender *Sender
	enc    *Encoder
	buf    []byte
}

// NewSpoolWriter writes into sp and wakes s.
func NewSpoolWriter(sp *spool.Spool, s *Sender) *SpoolWriter {
	return &SpoolWriter{Spool: sp, Sender: s, enc: NewEncoder()}
}

// SetProfile sets how the windows' fields are written.
func (o *SpoolWriter) SetProfile(p Profile) { o.enc.SetProfile(p) }

// WriteWindows spools the points of cs.
func (o *SpoolWriter) WriteWindows(cs []analysis.Closed) error {
	var encErr error
	b := o.buf[:0]
	for i := range cs {
		var err error
		if b, err = o.enc.appendWindow(b, &cs[i]); err != nil && encErr == nil {
			encErr = err
		}
	}
	o.buf = b
	// A failed append is counted as dropped by the spool; the daemon goes on.
	err := o.Spool.Append(b)
	o.Sender.Notify()
	return errors.Join(encErr, err)
}
