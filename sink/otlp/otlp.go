// Package otlp pushes the joined windows to an OpenTelemetry (OTLP/HTTP,
// protobuf) metrics receiver: a sink.Writer that turns a spooled batch of
// numeric-profile line protocol into OTLP gauges, one per field, named as
// the /metrics window gauges are (sink.WindowMetricOf), each point
// stamped with its window's start. It sends through the OpenTelemetry Go
// SDK's exporter with the exporter's own retries off: the sink.Sender that
// drains the spool retries, backs off and quarantines, so a batch stays
// in the spool until the receiver takes it.
package otlp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
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
	exp *otlpmetrichttp.Exporter
	hc  *http.Client
	url string // redacted, for errors
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
	hc := &http.Client{Transport: &observer{next: tr, userAgent: cfg.UserAgent}, Timeout: cfg.Timeout}
	opts := []otlpmetrichttp.Option{
		otlpmetrichttp.WithEndpointURL(u),
		otlpmetrichttp.WithHTTPClient(hc),
		// The Sender retries, backs off and keeps the batch; a retry
		// inside the exporter would hold it past sink.otlp.timeout and
		// hide the answer.
		otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: false}),
		// Explicit, so that OTEL_EXPORTER_OTLP_* variables do not add
		// to what the configuration says.
		otlpmetrichttp.WithHeaders(headers),
		otlpmetrichttp.WithCompression(otlpmetrichttp.NoCompression),
	}
	if cfg.GZip {
		opts = append(opts, otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
	}
	if cfg.Timeout > 0 {
		opts = append(opts, otlpmetrichttp.WithTimeout(cfg.Timeout))
	}
	exp, err := otlpmetrichttp.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	return &Writer{exp: exp, hc: hc, url: redact.URL(u)}, nil
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
	var a answer
	err = w.exp.Export(context.WithValue(ctx, answerKey{}, &a), rm)
	return w.classify(ctx, err, &a)
}

func (w *Writer) classify(ctx context.Context, err error, a *answer) error {
	switch s := a.status; {
	case !a.sent && err != nil && ctx.Err() == nil:
		// Refused before a request was made: the exporter's size bound
		// (64 MiB of protobuf). Smaller halves pass.
		return &sink.WriteError{Op: op, Status: http.StatusRequestEntityTooLarge, Err: err}
	case s >= 200 && s < 300 && a.rejected > 0:
		// The receiver kept the others: the Sender splits the batch and
		// resends them (the same points at the same times) until the
		// refused ones are alone, and quarantines those.
		return &sink.WriteError{Op: op, Status: s, Content: true,
			Err: fmt.Errorf("%s: partial success, %d points rejected: %s", w.url, a.rejected, a.message)}
	case s >= 200 && s < 300:
		return nil
	case err == nil:
		return nil
	case s == 0:
		return &sink.WriteError{Op: op, Retry: true, Err: err}
	}
	we := &sink.WriteError{Op: op, Status: a.status, After: a.after, Err: err}
	switch s := a.status; {
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

// Probe sends an export of no points: the receiver answers as it would
// a batch, so the endpoint, the headers and TLS are checked and nothing
// is stored.
func (w *Writer) Probe(ctx context.Context) error {
	var a answer
	err := w.exp.Export(context.WithValue(ctx, answerKey{}, &a),
		&metricdata.ResourceMetrics{Resource: Resource, ScopeMetrics: []metricdata.ScopeMetrics{{Scope: Scope}}})
	return w.classify(ctx, err, &a)
}

// Close shuts the exporter down and closes its connections.
func (w *Writer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w.exp.Shutdown(ctx)
	w.hc.CloseIdleConnections()
}

// answer is what the receiver said to one export, as the exporter's
// errors do not carry it: the status, Retry-After, and the points a
// partial success rejected.
type answer struct {
	sent     bool
	status   int
	after    time.Duration
	rejected int64
	message  string
}

type answerKey struct{}

// observer notes the receiver's answer in the request context's answer,
// and names tpsmon in the User-Agent.
type observer struct {
	next      http.RoundTripper
	userAgent string
}

// maxAnswer bounds the success body read for a partial success (the
// exporter's own bound is 4 MiB).
const maxAnswer = 4 << 20

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	a, _ := req.Context().Value(answerKey{}).(*answer)
	if o.userAgent != "" {
		req = req.Clone(req.Context())
		req.Header.Set("User-Agent", o.userAgent+" "+req.Header.Get("User-Agent"))
	}
	resp, err := o.next.RoundTrip(req)
	if a == nil {
		return resp, err
	}
	a.sent = true
	if err != nil {
		return resp, err
	}
	a.status = resp.StatusCode
	if v := resp.Header.Get("Retry-After"); v != "" {
		if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
			a.after = time.Duration(secs) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			a.after = max(time.Until(t), 0)
		}
	}
	if resp.StatusCode/100 == 2 && resp.Header.Get("Content-Type") == "application/x-protobuf" {
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var r colmetricpb.ExportMetricsServiceResponse
		if rerr == nil && proto.Unmarshal(body, &r) == nil && r.PartialSuccess != nil {
			a.rejected, a.message = r.PartialSuccess.GetRejectedDataPoints(), r.PartialSuccess.GetErrorMessage()
		}
	}
	return resp, nil
}
