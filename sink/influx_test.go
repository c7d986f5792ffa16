package sink

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/sink/influxtest"
)

func TestInfluxWriteReadBack(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "sinktest")
	in, err := NewInflux(InfluxConfig{URL: base, Bucket: db + "/autogen", Timeout: 5 * time.Second, GZip: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := NewEncoder()
	ts := time.Unix(1_700_000_000, 0)
	var lines []byte
	for i := range 3 {
		p := write.NewPoint("tpsmon_server", map[string]string{"host": "h", "server": "s"},
			map[string]any{"tokens": int64(100 * i), "system_tps": 10.5 * float64(i), "state": "ok"},
			ts.Add(time.Duration(i)*10*time.Second))
		if lines, err = enc.AppendWrite(lines, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Write(context.Background(), lines); err != nil {
		t.Fatal(err)
	}
	rows := influxtest.Query(t, base, db, "SELECT tokens, system_tps, state FROM tpsmon_server")[0].Rows()
	if len(rows) != 3 {
		t.Fatalf("read back %d rows, want 3", len(rows))
	}
	if rows[2]["tokens"].(interface{ String() string }).String() != "200" || rows[2]["state"] != "ok" {
		t.Errorf("row 2 = %v", rows[2])
	}
}

func TestEncoderRejectsNaN(t *testing.T) {
	enc := NewEncoder()
	good := write.NewPoint("m", map[string]string{"a": "b"}, map[string]any{"v": 1.0}, time.Unix(1, 0))
	bad := write.NewPoint("m", map[string]string{"a": "b"}, map[string]any{"ok": 1.0, "v": nanValue()}, time.Unix(2, 0))
	out, err := enc.AppendWrite(nil, good)
	if err != nil {
		t.Fatal(err)
	}
	out2, err := enc.AppendWrite(out, bad)
	if err == nil {
		t.Fatal("NaN field encoded")
	}
	if string(out2) != string(out) || string(out) != "m,a=b v=1 1000\n" {
		t.Errorf("after a failed point the buffer is %q, want only the good line", out2)
	}
}

func nanValue() float64 { var z float64; return z / z }

func TestClassify(t *testing.T) {
	tests := []struct {
		status int
		retry  bool
	}{
		{http.StatusBadRequest, false},
		{http.StatusUnprocessableEntity, false},
		{http.StatusUnauthorized, true},
		{http.StatusNotFound, true},
		{http.StatusTooManyRequests, true},
		{http.StatusServiceUnavailable, true},
	}
	for _, tt := range tests {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			http.Error(w, `{"error":"nope"}`, tt.status)
		}))
		in, _ := NewInflux(InfluxConfig{URL: srv.URL, Bucket: "db"})
		err := in.Write(context.Background(), []byte("m v=1 1\n"))
		var we *WriteError
		if !errors.As(err, &we) || we.Status != tt.status || we.Retry != tt.retry {
			t.Errorf("HTTP %d: %#v, want status and retry=%v", tt.status, err, tt.retry)
		}
		if tt.status == http.StatusTooManyRequests && we.After != 7*time.Second {
			t.Errorf("Retry-After = %v, want 7s", we.After)
		}
		in.Close()
		srv.Close()
	}
	// Nothing listens: a transport error, retried.
	in, _ := NewInflux(InfluxConfig{URL: "http://127.0.0.1:1", Bucket: "db", Timeout: time.Second})
	var we *WriteError
	if err := in.Write(context.Background(), []byte("m v=1 1\n")); !errors.As(err, &we) || we.Status != 0 || !we.Retry {
		t.Errorf("connection refused: %v", err)
	}
}
