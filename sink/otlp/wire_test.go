package otlp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tpsmon/tpsmon/sink"
)

// TestPartialSuccess: the response's partial_success read without the
// collector's types; fields it does not know are skipped, a field given
// twice is the last one, a body cut short is an error.
func TestPartialSuccess(t *testing.T) {
	twice := append(exportResponse(3, "first"), exportResponse(5, "second")...)
	unknown := protowire.AppendTag(nil, 7, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "later field")
	unknown = protowire.AppendTag(unknown, 9, protowire.Fixed64Type)
	unknown = protowire.AppendFixed64(unknown, 42)
	unknown = append(unknown, exportResponse(2, "two")...)
	for _, c := range []struct {
		name     string
		body     []byte
		rejected int64
		message  string
		err      bool
	}{
		{name: "empty", body: nil},
		{name: "rejected", body: exportResponse(4, "bad points"), rejected: 4, message: "bad points"},
		{name: "message only", body: exportResponse(0, "a warning"), message: "a warning"},
		{name: "given twice", body: twice, rejected: 5, message: "second"},
		{name: "unknown fields", body: unknown, rejected: 2, message: "two"},
		{name: "cut short", body: exportResponse(4, "bad points")[:5], err: true},
		{name: "not protobuf", body: []byte{0xff}, err: true},
	} {
		rejected, message, err := PartialSuccess(c.body)
		if (err != nil) != c.err || rejected != c.rejected || message != c.message {
			t.Errorf("%s: %d %q %v, want %d %q, error %v", c.name, rejected, message, err, c.rejected, c.message, c.err)
		}
	}
}

// TestRetryAfter: seconds or an HTTP date; anything else is none.
func TestRetryAfter(t *testing.T) {
	for _, c := range []struct {
		v        string
		min, max time.Duration
	}{
		{"", 0, 0},
		{"7", 7 * time.Second, 7 * time.Second},
		{" 2 ", 2 * time.Second, 2 * time.Second},
		{"-3", 0, 0},
		{"soon", 0, 0},
		{time.Now().Add(time.Minute).UTC().Format(http.TimeFormat), 58 * time.Second, time.Minute},
		{"Mon, 02 Jan 2006 15:04:05 GMT", 0, 0}, // past
	} {
		if got := retryAfter(c.v); got < c.min || got > c.max {
			t.Errorf("Retry-After %q: %v, want %v..%v", c.v, got, c.min, c.max)
		}
	}
}

// TestErrorBody: a refusal's message reaches the error, OTLP's protobuf
// google.rpc.Status read for its message, text as it is; the status stays
// what errors.As finds.
func TestErrorBody(t *testing.T) {
	status := protowire.AppendTag(nil, 1, protowire.VarintType)
	status = protowire.AppendVarint(status, 3)
	status = protowire.AppendTag(status, 2, protowire.BytesType)
	status = protowire.AppendString(status, "metric name missing")
	for _, c := range []struct {
		name, contentType string
		body              []byte
		want              string
	}{
		{"protobuf status", "application/x-protobuf", status, "400 Bad Request: metric name missing"},
		{"text", "text/plain", []byte("  no such tenant\n"), "400 Bad Request: no such tenant"},
		{"nothing", "text/plain", nil, "400 Bad Request"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", c.contentType)
			w.WriteHeader(http.StatusBadRequest)
			w.Write(c.body)
		}))
		err := newWriter(t, srv.URL, Config{}).Write(context.Background(), numericLP(t, windows(0, 1)))
		srv.Close()
		var we *sink.WriteError
		if !errors.As(err, &we) || we.Status != http.StatusBadRequest || !we.Content {
			t.Errorf("%s: %#v", c.name, err)
			continue
		}
		if !strings.HasSuffix(err.Error(), c.want) {
			t.Errorf("%s: %q, want it to end %q", c.name, err, c.want)
		}
	}
}

// TestTransportErrorUnwraps: a deadline stays what errors.Is finds, the
// URL's password never shows.
func TestTransportErrorUnwraps(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	u := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := newWriter(t, u, Config{}).Write(ctx, numericLP(t, windows(0, 1)))
	var we *sink.WriteError
	if !errors.As(err, &we) || !we.Retry || we.Status != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%#v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the password shows: %v", err)
	}
}
