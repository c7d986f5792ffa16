package influxql

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/tinylib/msgp/msgp"
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

// packJSON writes a JSON answer as InfluxDB's MessagePack writer would:
// the same maps, arrays and values, an integer as one.
func packJSON(t *testing.T, body string) []byte {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	var buf bytes.Buffer
	w := msgp.NewWriter(&buf)
	var put func(v any)
	put = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			w.WriteMapHeader(uint32(len(x)))
			for _, k := range slices.Sorted(maps.Keys(x)) {
				w.WriteString(k)
				put(x[k])
			}
		case []any:
			w.WriteArrayHeader(uint32(len(x)))
			for _, e := range x {
				put(e)
			}
		case json.Number:
			if i, err := x.Int64(); err == nil {
				w.WriteInt64(i)
			} else {
				f, _ := x.Float64()
				w.WriteFloat64(f)
			}
		default:
			if err := w.WriteIntf(x); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(v)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestEachMsgpack: a MessagePack answer reads as its JSON twin does,
// numbers as their values; what is no answer is said so.
func TestEachMsgpack(t *testing.T) {
	for _, body := range []string{
		`{"results":[{"statement_id":0,"series":[{"name":"tpsmon_server","tags":{"server":"a","host":"h"},"columns":["time","tokens","tps","state","up","none"],"values":[[1700000000,12345678901234567,2.5,"ok",true,null],[1700000010,-3,1e300,"",false,null]]}]},{"statement_id":1,"series":[{"name":"other"}]}]}`,
		`{"results":[{"statement_id":0}]}`,
		`{"x":{"y":[1]},"results":[{"series":[{"values":[[1]],"name":"m","extra":true}],"statement_id":0,"partial":false}]}`,
		`{"results":[{"statement_id":0,"series":[{"name":"a"}],"error":"partial: timeout"}]}`,
		`{"results":[{"statement_id":0,"messages":[{"level":"warning","text":"deprecated"}],"series":[{"name":"a","columns":["time"],"values":[[1]]}]}]}`,
		`{"results":[]}`,
		`{"results":[{"statement_id":0,"error":"database not found: x"}]}`,
		`{"error":"error parsing query: found EOF"}`,
	} {
		var want []Series
		wantErr := Each(strings.NewReader(body), func(s Series) error { want = append(want, s); return nil })
		var got []Series
		err := EachMsgpack(bytes.NewReader(packJSON(t, body)), func(s Series) error { got = append(got, s); return nil })
		if fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Errorf("%s: error %v, JSON's %v", body, err, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d series, JSON's %d", body, len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.Name != w.Name || !reflect.DeepEqual(g.Columns, w.Columns) || len(g.Values) != len(w.Values) || len(g.Tags) != len(w.Tags) {
				t.Fatalf("%s: series %d %#v, JSON's %#v", body, i, g, w)
			}
			for k, v := range w.Tags {
				if g.Tags[k] != v {
					t.Errorf("%s: tag %s %q, JSON's %q", body, k, g.Tags[k], v)
				}
			}
			for r := range w.Values {
				for c := range w.Values[r] {
					gv, wv := g.Values[r][c], w.Values[r][c]
					gn, gok := Num(gv)
					wn, wok := Num(wv)
					if gok != wok || gok && gn != wn || !gok && gv != wv {
						t.Errorf("%s: cell %d,%d %#v, JSON's %#v", body, r, c, gv, wv)
					}
				}
			}
		}
	}
	good := packJSON(t, `{"results":[{"statement_id":0,"series":[{"name":"x","columns":["a"],"values":[[1],[2]]}]}]}`)
	nested := packJSON(t, `{"results":[{"statement_id":0,"series":[{"name":"x","columns":["a"],"values":[[[1]]]}]}]}`)
	for name, body := range map[string][]byte{
		"truncated":             good[:len(good)-3],
		"more after the answer": append(append([]byte{}, good...), good...),
		"a proxy's page":        []byte(`<html>502 Bad Gateway</html>`),
		"a list in a cell":      nested,
		"empty":                 nil,
	} {
		err := EachMsgpack(bytes.NewReader(body), func(Series) error { return nil })
		if !errors.Is(err, ErrUndecodable) {
			t.Errorf("%s: error %v, want undecodable", name, err)
		}
	}
	// A reader that fails is told from a bad answer; each's error ends it.
	boom := errors.New("connection reset")
	err := EachMsgpack(io.MultiReader(bytes.NewReader(good[:10]), iotest.ErrReader(boom)), func(Series) error { return nil })
	if !errors.Is(err, boom) || errors.Is(err, ErrUndecodable) {
		t.Errorf("error %v, want the reader's, not undecodable", err)
	}
	stop := errors.New("enough")
	if err := EachMsgpack(bytes.NewReader(good), func(Series) error { return stop }); err != stop {
		t.Errorf("each's error came back as %v", err)
	}
}
