package sink

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/window"
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
		w := analysis.ServerWindow{State: schema.StateOK, ServerWindow: window.ServerWindow{Start: ts.Add(time.Duration(i) * 10 * time.Second), Length: 10 * time.Second,
			Host: "h", Server: "s", Tokens: window.Some(int64(100 * i)), SystemTPS: window.Some(10.5 * float64(i)),
			Source: schema.SourceMetrics}}
		if lines, err = enc.Append(lines, ServerPoint(w)); err != nil {
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
	if rows[2][schema.FieldTokens].(interface{ String() string }).String() != "200" || rows[2][schema.FieldState] != schema.StateOK {
		t.Errorf("row 2 = %v", rows[2])
	}
}

func TestEncoderRejectsNaN(t *testing.T) {
	enc := NewEncoder()
	good := Point{Measurement: "m", Tags: []Tag{{"a", "b"}}, Fields: []Field{{"v", 1.0}}, Time: time.Unix(1, 0)}
	bad := Point{Measurement: "m", Tags: []Tag{{"a", "b"}}, Fields: []Field{{"ok", 1.0}, {"v", nanValue()}}, Time: time.Unix(2, 0)}
	out, err := enc.Append(nil, good)
	if err != nil {
		t.Fatal(err)
	}
	out2, err := enc.Append(out, bad)
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

// TestGZipOnlyLargeWrites: with gzip on, a window's few KB go plain and a
// backlog of GZipMin or more goes compressed; both arrive whole, over one
// connection.
func TestGZipOnlyLargeWrites(t *testing.T) {
	type req struct {
		encoding string
		lines    int
		remote   string
	}
	reqs := make(chan req, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			z, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Errorf("gzip body: %v", err)
				return
			}
			body = z
		}
		b, _ := io.ReadAll(body)
		reqs <- req{r.Header.Get("Content-Encoding"), strings.Count(string(b), "\n") + 1, r.RemoteAddr}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	in, err := NewInflux(InfluxConfig{URL: srv.URL, Bucket: "db/rp", Timeout: 5 * time.Second, GZip: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	line := "tpsmon_server,host=h,server=s tokens=100i 1700000000000\n"
	conns := map[string]bool{}
	for _, tc := range []struct {
		lines    int
		encoding string
	}{
		{20, ""},
		{GZipMin/len(line) + 1, "gzip"},
		{1, ""},
	} {
		if err := in.Write(context.Background(), []byte(strings.Repeat(line, tc.lines))); err != nil {
			t.Fatal(err)
		}
		got := <-reqs
		conns[got.remote] = true
		if got.encoding != tc.encoding || got.lines != tc.lines {
			t.Errorf("%d lines sent as %q with %d lines, want %q", tc.lines, got.encoding, got.lines, tc.encoding)
		}
	}
	if len(conns) != 1 {
		t.Errorf("plain and compressed writes used %d connections, want one: %v", len(conns), conns)
	}
}
