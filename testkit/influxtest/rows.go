package influxtest

import (
	"encoding/json"
	"testing"
)

// Num is a numeric value of a query's row; anything else fails the test.
func Num(t testing.TB, v any) float64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v (%T) is not a number", v, v)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// WindowStarts returns the distinct window starts (Unix seconds) of a
// server's points in db and how many rows there were: a window written
// twice shows as more rows than starts.
func WindowStarts(t testing.TB, base, db, server string) (map[int64]bool, int) {
	t.Helper()
	series := Query(t, base, db, `SELECT tokens, coverage FROM tpsmon_server WHERE "server" = '`+server+`'`)
	got := map[int64]bool{}
	if len(series) == 0 {
		return got, 0
	}
	rows := series[0].Rows()
	for _, r := range rows {
		got[int64(Num(t, r["time"]))] = true
	}
	return got, len(rows)
}
