package influxql

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    []Series
		err     error  // errors.Is
		message string // the server's, as is
	}{
		{"series of the first statement",
			`{"results":[{"statement_id":0,"series":[{"name":"tpsmon_server","tags":{"server":"a"},"columns":["time","tokens","state"],"values":[[1700000000,12345678901234567,"ok"]]}]},{"statement_id":1,"series":[{"name":"other"}]}]}`,
			[]Series{{Name: "tpsmon_server", Tags: map[string]string{"server": "a"}, Columns: []string{"time", "tokens", "state"},
				Values: [][]any{{json.Number("1700000000"), json.Number("12345678901234567"), "ok"}}}}, nil, ""},
		{"no series", `{"results":[{"statement_id":0}]}`, nil, nil, ""},
		{"series null", `{"results":[{"statement_id":0,"series":null}]}`, nil, nil, ""},
		{"keys in any order, unknown ones read past", `{"x":{"y":[1]},"results":[{"series":[{"values":[[1]],"name":"m","extra":true}],"statement_id":0,"partial":false}]}`,
			[]Series{{Name: "m", Values: [][]any{{json.Number("1")}}}}, nil, ""},
		{"series not a list", `{"results":[{"series":{"name":"m"}}]}`, nil, ErrUndecodable, ""},
		{"a bad series", `{"results":[{"series":[{"name":"a"},{"name":7}]}]}`, nil, ErrUndecodable, ""},
		{"error after series", `{"results":[{"statement_id":0,"series":[{"name":"a"}],"error":"partial: timeout"}]}`, nil, nil, "partial: timeout"},
		{"no results", `{"results":[]}`, nil, nil, ""},
		{"statement error", `{"results":[{"statement_id":0,"error":"database not found: x"}]}`, nil, nil, "database not found: x"},
		{"request error", `{"error":"error parsing query: found EOF"}`, nil, nil, "error parsing query: found EOF"},
		{"a proxy's page", `<html>502 Bad Gateway</html>`, nil, ErrUndecodable, ""},
		{"truncated", `{"results":[{"statement_id":0,"series":[{"name":"x","values":[[1,`, nil, ErrUndecodable, ""},
		{"more after the answer", `{"results":[]} {"results":[]}`, nil, ErrUndecodable, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode([]byte(tc.body))
			switch {
			case tc.message != "":
				if err == nil || err.Error() != tc.message || errors.Is(err, ErrUndecodable) {
					t.Errorf("error %v, want the server's %q", err, tc.message)
				}
			case !errors.Is(err, tc.err):
				t.Errorf("error %v, want %v", err, tc.err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

// TestEachStreams: the series reach each one at a time, before the
// answer is read to its end; each's error ends the reading as it is; a
// failing reader is told from a bad answer.
func TestEachStreams(t *testing.T) {
	body := `{"results":[{"statement_id":0,"series":[{"name":"a"},{"name":"b"},{"name":"c"}]}]}`
	// A reader that fails after the second series: the first two are
	// handed on before the failure.
	cut := strings.Index(body, `{"name":"c"`)
	boom := errors.New("connection reset")
	var names []string
	err := Each(io.MultiReader(strings.NewReader(body[:cut]), iotest.ErrReader(boom)), func(s Series) error {
		names = append(names, s.Name)
		return nil
	})
	if !errors.Is(err, boom) || errors.Is(err, ErrUndecodable) {
		t.Errorf("error %v, want the reader's, not undecodable", err)
	}
	if !reflect.DeepEqual(names, []string{"a", "b"}) {
		t.Errorf("handed %v before the reader failed, want a and b", names)
	}
	stop := errors.New("enough")
	names = nil
	err = Each(strings.NewReader(body), func(s Series) error {
		names = append(names, s.Name)
		if s.Name == "b" {
			return stop
		}
		return nil
	})
	if err != stop || !reflect.DeepEqual(names, []string{"a", "b"}) {
		t.Errorf("each's error: got %v after %v, want it as it is after a and b", err, names)
	}
}

func TestRowsAndNum(t *testing.T) {
	s := Series{Columns: []string{"time", "tokens", "state"}, Values: [][]any{{json.Number("1700000000"), 2.5, "ok"}}}
	rows := s.Rows()
	if len(rows) != 1 || rows[0]["state"] != "ok" {
		t.Fatalf("rows %v", rows)
	}
	for col, want := range map[string]float64{"time": 1700000000, "tokens": 2.5} {
		if v, ok := Num(rows[0][col]); !ok || v != want {
			t.Errorf("%s: %v %v, want %v", col, v, ok, want)
		}
	}
	if _, ok := Num(rows[0]["state"]); ok {
		t.Error("a string read as a number")
	}
	if _, ok := Num(json.Number("1e")); ok {
		t.Error("a malformed number read")
	}
}
