package influxql

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
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
