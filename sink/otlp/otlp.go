// Package otlp pushes the joined windows to an OpenTelemetry (OTLP/HTTP,
// protobuf) metrics receiver: a sink.Writer that turns a spooled batch of
// numeric-profile line protocol into OTLP gauges, one per field, named as
// the /metrics window gauges are (sink.WindowMetricOf), each point
// stamped with its window's start. It posts the request itself, with the
// official OTLP message types and net/http, not through the OpenTelemetry
// SDK's exporter: that one brings the SDK and, by the collector service's
// package, all of gRPC into the daemon. It never retries: the sink.Sender
// that drains the spool retries, backs off and quarantines, so a batch
// stays in the spool until the receiver takes it.
package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tpsmon/tpsmon/internal/redact"
	"github.com/tpsmon/tpsmon/sink"
)

// Config locates the receiver: the configuration's sink.otlp, decoded by
// package config under these keys.
type Config struct {
	// Endpoint is the receiver's metrics URL; one without a path gets
	// DefaultPath, OTLP/HTTP's.
	Endpoint string `mapstructure:"endpoint"`
	// Headers are sent with every request (an Authorization, a tenant),
	// each "Name: value" (HeaderMap); their values never reach the log. A
	// list, not a map: a list is one configuration key, so a reload may
	// drop a header, and TPSMON_SINK_OTLP_HEADERS gives it as "a: b,c: d".
	Headers []string      `mapstructure:"headers"`
	Timeout time.Duration `mapstructure:"timeout"`
	// GZip compresses the requests.
	GZip bool           `mapstructure:"gzip"`
	TLS  sink.TLSConfig `mapstructure:"tls"`

	// UserAgent is filled by the caller: tpsmon's name and version.
	UserAgent string `mapstructure:"-"`
}

// Equal tells whether c and o configure the same writer.
func (c Config) Equal(o Config) bool {
	return c.Endpoint == o.Endpoint && slices.Equal(c.Headers, o.Headers) && c.Timeout == o.Timeout &&
		c.GZip == o.GZip && c.TLS == o.TLS && c.UserAgent == o.UserAgent
}

// HeaderMap returns Headers by name; an entry that is not "Name: value",
// or a name or value HTTP cannot carry, is an error that names the
// header (never its value).
func (c Config) HeaderMap() (map[string]string, error) {
	out := make(map[string]string, len(c.Headers))
	for i, h := range c.Headers {
		k, v, ok := strings.Cut(h, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return nil, fmt.Errorf("entry %d: want \"Name: value\"", i+1)
		case !headerName(k):
			return nil, fmt.Errorf("entry %d: %q is not a header name", i+1, k)
		case strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
			return nil, fmt.Errorf("%s: the value holds a control character", k)
		}
		if _, dup := out[http.CanonicalHeaderKey(k)]; dup {
			return nil, fmt.Errorf("%s: given twice", k)
		}
		out[http.CanonicalHeaderKey(k)] = v
	}
	return out, nil
}

// headerName tells whether k is an HTTP header name (RFC 9110's token).
func headerName(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// DefaultPath is OTLP/HTTP's path for metrics.
const DefaultPath = "/v1/metrics"

// EndpointURL returns the URL requests go to: endpoint, with DefaultPath
// when it has no path.
func EndpointURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("%s: want http:// or https:// and a host", redact.URL(endpoint))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = DefaultPath
	}
	return u.String(), nil
}

// Writer exports spooled batches; it is a sink.Writer.
type Writer struct {
	hc        *http.Client
	endpoint  string // the URL requests go to
	url       string // redacted, for errors
	headers   map[string]string
	userAgent string
	gzip      bool
}

// op names an export in errors and the log.
const op = "otlp export"

// New returns a writer for cfg.
func New(cfg Config) (*Writer, error) {
	u, err := EndpointURL(cfg.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("otlp endpoint: %w", err)
	}
	headers, err := cfg.HeaderMap()
	if err != nil {
		return nil, fmt.Errorf("otlp headers: %w", err)
	}
	tc, err := cfg.TLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tc != nil {
		tr.TLSClientConfig = tc
	}
	// Timeout bounds each request, its answer read too; the proxy
	// variables apply as for any HTTP client (DefaultTransport's).
	hc := &http.Client{Transport: tr, Timeout: cfg.Timeout}
	return &Writer{hc: hc, endpoint: u, url: redact.URL(u), headers: headers, userAgent: cfg.UserAgent, gzip: cfg.GZip}, nil
}

// Write exports the points of lines (numeric-profile line protocol) in
// one request. A line that cannot be read is refused for its content
// (the Sender finds it and quarantines it); the receiver's answer is
// classified as sink.Influx classifies InfluxDB's: transport errors, 429
// and 5xx are retried, 401/403/404 kept until the configuration is
// fixed, 400 (OTLP's "the data is invalid, do not retry") and a partial
// success that rejects points are refused content, 413 splits the batch.
func (w *Writer) Write(ctx context.Context, lines []byte) error {
	rm, n, err := Decode(lines)
	if err != nil {
		return &sink.WriteError{Op: op, Content: true, Err: err}
	}
	if n == 0 {
		return nil
	}
	return w.export(ctx, rm)
}

// Probe sends an export of no points: the receiver answers as it would
// a batch, so the endpoint, the headers and TLS are checked and nothing
// is stored.
func (w *Writer) Probe(ctx context.Context) error {
	return w.export(ctx, &metricpb.ResourceMetrics{Resource: newResource(),
		ScopeMetrics: []*metricpb.ScopeMetrics{{Scope: newScope()}}})
}

// Close closes the writer's idle connections.
func (w *Writer) Close() {
	w.hc.CloseIdleConnections()
}

// maxRequest bounds a request's protobuf (before gzip): a bigger batch is
// refused as a receiver's 413 would refuse it, without sending, and the
// Sender splits it. Receivers' own bounds are smaller still (the OTel
// Collector's default is 20 MiB); this one keeps one outsized backlog
// from being held in memory twice.
const maxRequest = 64 << 20

// Request encodes the ExportMetricsServiceRequest that carries rm: its
// field 1 (resource_metrics) is rm, length-prefixed. The envelope is
// written here so that the collector service's package, which brings
// gRPC with its stubs, stays out of the binary.
func Request(rm *metricpb.ResourceMetrics) ([]byte, error) {
	size := proto.Size(rm)
	b := make([]byte, 0, protowire.SizeTag(1)+protowire.SizeBytes(size))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, rm)
}

// gzips keeps the compressors between requests: a flate writer is some
// hundreds of KiB, one a request would be garbage every window.
var gzips = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

func compress(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(b) / 4)
	zw := gzips.Get().(*gzip.Writer)
	defer gzips.Put(zw)
	zw.Reset(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// export posts rm and classifies the answer.
func (w *Writer) export(ctx context.Context, rm *metricpb.ResourceMetrics) error {
	body, err := Request(rm)
	if err != nil {
		return &sink.WriteError{Op: op, Content: true, Err: fmt.Errorf("encode the request: %w", err)}
	}
	if len(body) > maxRequest {
		return &sink.WriteError{Op: op, Status: http.StatusRequestEntityTooLarge,
			Err: fmt.Errorf("%d bytes of protobuf, over the %d a request may carry", len(body), maxRequest)}
	}
	if w.gzip {
		if body, err = compress(body); err != nil {
			return &sink.WriteError{Op: op, Err: fmt.Errorf("gzip: %w", err)}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.endpoint, bytes.NewReader(body))
	if err != nil {
		return &sink.WriteError{Op: op, Err: fmt.Errorf("%s: %w", w.url, err)}
	}
	if w.userAgent != "" {
		req.Header.Set("User-Agent", w.userAgent)
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	// After the configured headers: the body is what these say.
	req.Header.Set("Content-Type", "application/x-protobuf")
	if w.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		// url.Error repeats the URL unredacted; ours is redacted.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return &sink.WriteError{Op: op, Retry: true, Err: fmt.Errorf("%s: %w", w.url, err)}
	}
	defer resp.Body.Close()
	return w.classify(resp)
}

// maxAnswer bounds the success body read for a partial success;
// maxMessage what an error's body adds to the error.
const (
	maxAnswer  = 4 << 20
	maxMessage = 512
)

func (w *Writer) classify(resp *http.Response) error {
	s := resp.StatusCode
	if s >= 200 && s < 300 {
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		if err != nil {
			// The receiver has the points, or will not say: sending
			// them again would store them twice where it has them.
			return nil
		}
		if resp.Header.Get("Content-Type") != "application/x-protobuf" || len(body) == 0 {
			return nil
		}
		rejected, message, err := PartialSuccess(body)
		if err != nil || rejected <= 0 {
			return nil
		}
		// The receiver kept the others: the Sender splits the batch and
		// resends them (the same points at the same times) until the
		// refused ones are alone, and quarantines those.
		return &sink.WriteError{Op: op, Status: s, Content: true,
			Err: fmt.Errorf("%s: partial success, %d points rejected: %s", w.url, rejected, message)}
	}
	text, _ := io.ReadAll(io.LimitReader(resp.Body, maxMessage))
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer)) // so the connection is kept
	msg := string(text)
	if resp.Header.Get("Content-Type") == "application/x-protobuf" {
		// OTLP's error body: a google.rpc.Status, its message field 2.
		msg = statusMessage(text)
	}
	err := fmt.Errorf("%s: %s", w.url, resp.Status)
	if msg = strings.TrimSpace(strings.ToValidUTF8(msg, "?")); msg != "" {
		err = fmt.Errorf("%s: %s: %s", w.url, resp.Status, msg)
	}
	we := &sink.WriteError{Op: op, Status: s, After: retryAfter(resp.Header.Get("Retry-After")), Err: err}
	switch {
	case s == http.StatusTooManyRequests, s >= 500:
		we.Retry = true
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusNotFound:
		// Good points, a wrong header or path: kept until it is fixed.
		we.Retry = true
	case s == http.StatusBadRequest:
		we.Content = true
	}
	return we
}

// retryAfter reads a Retry-After header, seconds or a date; 0 when there
// is none or it cannot be read. The Sender waits at least this long
// before it sends again.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		return time.Duration(max(secs, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// PartialSuccess reads an ExportMetricsServiceResponse: its
// partial_success (field 1), rejected_data_points (1) and error_message
// (2). A field given twice merges as protobuf merges it: the last wins.
func PartialSuccess(b []byte) (rejected int64, message string, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			switch {
			case num == 1 && typ == protowire.VarintType:
				x, _ := protowire.ConsumeVarint(v)
				rejected = int64(x)
			case num == 2 && typ == protowire.BytesType:
				message = string(v)
			}
			return nil
		})
	})
	if err != nil {
		return 0, "", fmt.Errorf("export response: %w", err)
	}
	return rejected, message, nil
}

// statusMessage returns the message (field 2) of a google.rpc.Status, ""
// when b is none (it may be cut at maxMessage).
func statusMessage(b []byte) string {
	var msg string
	eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == 2 && typ == protowire.BytesType {
			msg = string(v)
		}
		return nil
	})
	return msg
}

// eachField calls f with each field of the message b: its number, wire
// type and value (a varint's bytes; a length-delimited field's content).
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
		}
		v := b[:m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := f(num, typ, v); err != nil {
			return err
		}
		b = b[m:]
	}
	return nil
}
