package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
)

// lpOutput writes line protocol.
type lpOutput struct {
	w   io.Writer
	enc *sink.Encoder
	buf []byte
}

func newLPOutput(w io.Writer) *lpOutput { return &lpOutput{w: w, enc: sink.NewEncoder()} }

func (o *lpOutput) WritePoints(pts []*write.Point) error {
	b, err := encodeAll(o.enc, o.buf[:0], pts)
	o.buf = b
	if _, werr := o.w.Write(b); werr != nil {
		return werr
	}
	return err
}

// encodeAll encodes every point it can; a point that cannot be encoded is
// reported, the others still go out.
func encodeAll(enc *sink.Encoder, dst []byte, pts []*write.Point) ([]byte, error) {
	var first error
	for _, p := range pts {
		var err error
		if dst, err = enc.Append(dst, p); err != nil && first == nil {
			first = err
		}
	}
	return dst, first
}

// jsonOutput writes one JSON object per point (design §7).
type jsonOutput struct{ enc *json.Encoder }

func newJSONOutput(w io.Writer) *jsonOutput { return &jsonOutput{enc: json.NewEncoder(w)} }

type jsonPoint struct {
	Measurement string            `json:"measurement"`
	Time        string            `json:"time"`
	Tags        map[string]string `json:"tags"`
	Fields      map[string]any    `json:"fields"`
}

func (o *jsonOutput) WritePoints(pts []*write.Point) error {
	for _, p := range pts {
		jp := jsonPoint{Measurement: p.Name(), Time: p.Time().UTC().Format(time.RFC3339Nano),
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

// tableOutput prints one row per server window, with its GPUs summed up,
// for a person at a terminal.
type tableOutput struct {
	w      io.Writer
	header bool
}

func (o *tableOutput) WritePoints(pts []*write.Point) error {
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

// influxOutput encodes points into the spool and wakes the sender.
type influxOutput struct {
	enc    *sink.Encoder
	spool  *spool.Spool
	sender *sink.Sender
	buf    []byte
}

func (o *influxOutput) WritePoints(pts []*write.Point) error {
	b, encErr := encodeAll(o.enc, o.buf[:0], pts)
	o.buf = b
	// A failed append is counted as dropped by the spool; the daemon goes on.
	err := o.spool.Append(b)
	o.sender.Notify()
	return errors.Join(encErr, err)
}

// newOutput returns the writer for a --format value.
func newOutput(format string, w io.Writer) (pointWriter, error) {
	switch format {
	case "table":
		return &tableOutput{w: w}, nil
	case "lp":
		return newLPOutput(w), nil
	case "json":
		return newJSONOutput(w), nil
	}
	return nil, fmt.Errorf("--format %q: want table, lp or json", format)
}
