// Package sink delivers joined points: encoded as InfluxDB line protocol,
// written to a file or stdout, or sent to InfluxDB.
package sink

import (
	"bytes"
	"fmt"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"
	lp "github.com/influxdata/line-protocol"
)

// Precision of the timestamps tpsmon writes. Window starts are whole
// seconds in practice; milliseconds leave room for sub-second windows.
const Precision = time.Millisecond

// Encoder turns points into line protocol, one line per point, with
// sorted fields and millisecond timestamps.
type Encoder struct {
	scratch bytes.Buffer
	enc     *lp.Encoder
}

// NewEncoder returns an Encoder.
func NewEncoder() *Encoder {
	e := &Encoder{}
	e.enc = lp.NewEncoder(&e.scratch)
	e.enc.SetPrecision(Precision)
	e.enc.SetFieldSortOrder(lp.SortFields)
	e.enc.SetFieldTypeSupport(lp.UintSupport)
	// NaN or Inf is an error instead of a silently dropped field.
	e.enc.FailOnFieldErr(true)
	return e
}

// Append encodes p and appends its line to dst. A point that cannot be
// encoded leaves dst as it was: the encoder may have written part of it
// to its scratch buffer, never to dst.
func (e *Encoder) Append(dst []byte, p *write.Point) ([]byte, error) {
	e.scratch.Reset()
	if _, err := e.enc.Encode(p); err != nil {
		return dst, fmt.Errorf("encode %s point at %s: %w", p.Name(), p.Time().UTC().Format(time.RFC3339), err)
	}
	return append(dst, e.scratch.Bytes()...), nil
}
