// Package influxql decodes the answers of InfluxDB's 1.x /query endpoint
// (InfluxDB 1.8, and the compatibility API of 2.x and 3.x): the report
// reads them, and so do the tests that check what tpsmon wrote.
package influxql

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Series is one series of a result.
type Series struct {
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
	Columns []string          `json:"columns"`
	Values  [][]any           `json:"values"`
}

// Rows returns each row as a map of column to value.
func (s Series) Rows() []map[string]any {
	out := make([]map[string]any, len(s.Values))
	for i, v := range s.Values {
		m := make(map[string]any, len(v))
		for j, c := range s.Columns {
			m[c] = v[j]
		}
		out[i] = m
	}
	return out
}

// ErrUndecodable marks a body that is no /query answer (a proxy's error
// page, a truncated body).
var ErrUndecodable = errors.New("not an InfluxQL answer")

// Decode reads a /query answer and returns the series of its first
// statement. Numbers stay json.Number, exact until Num reads them (a
// MessagePack answer's are int64, uint64 or float64). An
// error the server reported comes back as its message.
func Decode(body []byte) ([]Series, error) {
	var out []Series
	err := Each(bytes.NewReader(body), func(s Series) error {
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Each reads a /query answer from r and hands the series of its first
// statement to each, one at a time as they decode, so that reading an
// answer holds one series, not the whole answer. An error the server
// reported comes back as its message once the answer is read, so each
// may have seen series of an answer that fails: callers drop what they
// gathered. An error of each ends the reading and is returned as it is;
// one of r, wrapped; a body that is no answer, ErrUndecodable.
func Each(r io.Reader, each func(Series) error) error {
	src := &readErr{r: r}
	d := &answer{dec: json.NewDecoder(src), each: each}
	d.dec.UseNumber()
	err := d.top()
	if err == nil {
		if _, e := d.dec.Token(); !errors.Is(e, io.EOF) {
			err = fmt.Errorf("%w: more after the answer", ErrUndecodable)
		}
	}
	return outcome(err, src, d.eachErr, d.reqErr, d.stmtErr)
}

// outcome is what reading an answer comes to: each's error as it is, the
// reader's, the walk's, or the server's own (the request's, else its
// first statement's).
func outcome(err error, src *readErr, eachErr error, reqErr, stmtErr string) error {
	switch {
	case errors.Is(err, errFromEach):
		return eachErr
	case src.err != nil:
		return fmt.Errorf("reading the answer: %w", src.err)
	case err != nil:
		return err
	case reqErr != "":
		return errors.New(reqErr)
	case stmtErr != "":
		return errors.New(stmtErr)
	}
	return nil
}

// readErr keeps the error of the reader under the decoder, which the
// decoder's own error would hide: a reset connection is no bad answer.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		r.err = err
	}
	return n, err
}

// errFromEach marks the walk's end by each's error (kept in eachErr).
var errFromEach = errors.New("stopped by the caller")

// answer walks one answer's tokens: {"results":[{"series":[…],
// "error":…},…],"error":…}, decoding whole only one series at a time.
type answer struct {
	dec     *json.Decoder
	each    func(Series) error
	eachErr error
	reqErr  string // the request's error
	stmtErr string // the first statement's error
}

func (a *answer) undecodable(err error) error {
	return fmt.Errorf("%w: %w", ErrUndecodable, err)
}

// delim reads the next token, which must be d.
func (a *answer) delim(d json.Delim) error {
	t, err := a.dec.Token()
	if err != nil {
		return a.undecodable(err)
	}
	if t != d {
		return a.undecodable(fmt.Errorf("%v where %v was due", t, d))
	}
	return nil
}

// object reads an object's keys, handing each key's value to field.
func (a *answer) object(field func(key string) error) error {
	if err := a.delim('{'); err != nil {
		return err
	}
	for a.dec.More() {
		t, err := a.dec.Token()
		if err != nil {
			return a.undecodable(err)
		}
		key, _ := t.(string)
		if err := field(key); err != nil {
			return err
		}
	}
	return a.delim('}')
}

// skip reads past one value.
func (a *answer) skip() error {
	var v json.RawMessage
	if err := a.dec.Decode(&v); err != nil {
		return a.undecodable(err)
	}
	return nil
}

func (a *answer) text(dst *string) error {
	if err := a.dec.Decode(dst); err != nil {
		return a.undecodable(err)
	}
	return nil
}

func (a *answer) top() error {
	return a.object(func(key string) error {
		switch key {
		case "results":
			return a.results()
		case "error":
			return a.text(&a.reqErr)
		}
		return a.skip()
	})
}

func (a *answer) results() error {
	if err := a.delim('['); err != nil {
		return err
	}
	for i := 0; a.dec.More(); i++ {
		if i > 0 { // one statement per query: a later one is read past
			if err := a.skip(); err != nil {
				return err
			}
			continue
		}
		err := a.object(func(key string) error {
			switch key {
			case "series":
				return a.series()
			case "error":
				return a.text(&a.stmtErr)
			}
			return a.skip()
		})
		if err != nil {
			return err
		}
	}
	return a.delim(']')
}

func (a *answer) series() error {
	t, err := a.dec.Token()
	switch {
	case err != nil:
		return a.undecodable(err)
	case t == nil: // "series": null, as no series
		return nil
	case t != json.Delim('['):
		return a.undecodable(fmt.Errorf("%v where the series were due", t))
	}
	for a.dec.More() {
		var s Series
		if err := a.dec.Decode(&s); err != nil {
			return a.undecodable(err)
		}
		if err := a.each(s); err != nil {
			a.eachErr = err
			return errFromEach
		}
	}
	return a.delim(']')
}

// Num reads a numeric cell of a result.
func Num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case int64: // MessagePack's
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}
