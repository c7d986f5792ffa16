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
// statement. Numbers stay json.Number, exact until Num reads them. An
// error the server reported comes back as its message.
func Decode(body []byte) ([]Series, error) {
	var out struct {
		Results []struct {
			Series []Series `json:"series"`
			Error  string   `json:"error"`
		} `json:"results"`
		Error string `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUndecodable, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more after the answer", ErrUndecodable)
	}
	if out.Error != "" {
		return nil, errors.New(out.Error)
	}
	if len(out.Results) == 0 {
		return nil, nil
	}
	if e := out.Results[0].Error; e != "" {
		return nil, errors.New(e)
	}
	return out.Results[0].Series, nil
}

// Num reads a numeric cell of a result.
func Num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}
