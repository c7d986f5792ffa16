package sink

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink/spool"
)

// LPWriter writes line protocol.
type LPWriter struct {
	w   io.Writer
	enc *Encoder
	buf []byte
}

// NewLPWriter writes line protocol to w.
func NewLPWriter(w io.Writer) *LPWriter { return &LPWriter{w: w, enc: NewEncoder()} }

// WritePoints writes pts; a point that cannot be encoded is reported, the
// others still go out.
func (o *LPWriter) WritePoints(pts []*write.Point) error {
	b, err := encodeAll(o.enc, o.buf[:0], pts)
	o.buf = b
	if _, werr := o.w.Write(b); werr != nil {
		return werr
	}
	return err
}

// encodeAll encodes every point it can; a point that cannot be encoded is
// reported, the others still go out.
func encodeAll(enc *Encoder, dst []byte, pts []*write.Point) ([]byte, error) {
	var first error
	for _, p := range pts {
		var err error
		if dst, err = enc.Append(dst, p); err != nil && first == nil {
			first = err
		}
	}
	return dst, first
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

// WritePoints writes one line per point.
func (o *JSONWriter) WritePoints(pts []*write.Point) error {
	for _, p := range pts {
		jp := JSONPoint{Measurement: p.Name(), Time: p.Time().UTC().Format(time.RFC3339Nano),
			Tags: map[string]string{}, Fields: map[string]any{}}
		for _, t := range p.TagList() {
			jp.Tags[t.Key] = t.Value
		}
		for _, f := range p.FieldList() {
			jp.Fields[f.Key] = f.Value
		}
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

// WritePoints prints the server points of pts, a header first.
func (o *TableWriter) WritePoints(pts []*write.Point) error {
	if !o.header {
		fmt.Fprintf(o.w, "%-8s  %-10s %-13s %7s %9s %9s %7s %7s %5s %6s %7s %7s %5s\n",
			"window", "server", "state", "tokens", "sys tok/s", "user tok/s", "running", "waiting", "kv%", "gpu%", "power W", "tok/J", "cov")
		o.header = true
	}
	for _, p := range pts {
		if p.Name() != schema.Server {
			continue
		}
		f := map[string]any{}
		for _, x := range p.FieldList() {
			f[x.Key] = x.Value
		}
		var server string
		for _, t := range p.TagList() {
			if t.Key == schema.TagServer {
				server = t.Value
			}
		}
		fmt.Fprintf(o.w, "%-8s  %-10s %-13s %7s %9s %9s %7s %7s %5s %6s %7s %7s %5s\n",
			p.Time().Local().Format("15:04:05"), server, f[schema.FieldState],
			cell(f, schema.FieldTokens, 1, 0), cell(f, schema.FieldSystemTPS, 1, 1), cell(f, schema.FieldPerUserTPS, 1, 1),
			cell(f, schema.FieldRunning, 1, 1), cell(f, schema.FieldWaiting, 1, 1), cell(f, schema.FieldKVCacheUsage, 100, 0),
			cell(f, schema.FieldGPUUtil, 1, 0), cell(f, schema.FieldPowerW, 1, 0), cell(f, schema.FieldTokensPerJoule, 1, 2),
			cell(f, schema.FieldCoverage, 1, 2))
	}
	return nil
}

// cell formats field k scaled, or "-" when it is absent.
func cell(f map[string]any, k string, scale float64, prec int) string {
	switch v := f[k].(type) {
	case float64:
		return fmt.Sprintf("%.*f", prec, v*scale)
	case int64:
		return fmt.Sprintf("%d", v)
	}
	return "-"
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

// WritePoints spools pts.
func (o *SpoolWriter) WritePoints(pts []*write.Point) error {
	b, encErr := encodeAll(o.enc, o.buf[:0], pts)
	o.buf = b
	// A failed append is counted as dropped by the spool; the daemon goes on.
	err := o.Spool.Append(b)
	o.Sender.Notify()
	return errors.Join(encErr, err)
}
