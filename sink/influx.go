package sink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	"github.com/influxdata/influxdb-client-go/v2/api"
	ihttp "github.com/influxdata/influxdb-client-go/v2/api/http"

	"github.com/tpsmon/tpsmon/internal/redact"
)

// InfluxConfig locates an InfluxDB and its bucket. For InfluxDB 1.8 the
// bucket is "database/retention-policy" and the token "user:password" or
// empty.
type InfluxConfig struct {
	URL     string
	Org     string
	Bucket  string
	Token   string
	Timeout time.Duration
	GZip    bool
	CAFile  string
	// InsecureSkipVerify turns TLS certificate checks off.
	InsecureSkipVerify bool
	// UserAgent names tpsmon and its version.
	UserAgent string
}

// Influx writes line protocol through influxdb-client-go's blocking write
// API, one request per call: no hidden buffer that could drop points.
type Influx struct {
	client influxdb2.Client
	w      api.WriteAPIBlocking
	url    string
}

// NewInflux returns a writer for cfg.
func NewInflux(cfg InfluxConfig) (*Influx, error) {
	opts := influxdb2.DefaultOptions().
		SetPrecision(Precision).
		SetUseGZip(cfg.GZip).
		SetApplicationName(cfg.UserAgent)
	if cfg.Timeout > 0 {
		opts.SetHTTPRequestTimeout(uint(max(1, cfg.Timeout/time.Second)))
	}
	if cfg.CAFile != "" || cfg.InsecureSkipVerify {
		tc := &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // the operator asked for it
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fmt.Errorf("influx tls ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("influx tls ca_file %s: no PEM certificate in it", cfg.CAFile)
			}
			tc.RootCAs = pool
		}
		opts.SetTLSConfig(tc)
	}
	c := influxdb2.NewClientWithOptions(cfg.URL, cfg.Token, opts)
	return &Influx{client: c, w: c.WriteAPIBlocking(cfg.Org, cfg.Bucket), url: redact.URL(cfg.URL)}, nil
}

// WriteError is a failed write, classified.
type WriteError struct {
	Status int // HTTP status; 0 for a transport error
	// Retry is true when the same lines may succeed later (network, 429,
	// 5xx). Auth and bucket errors are retryable too: the data is good, the
	// configuration is not, and it must be kept until it is fixed.
	Retry bool
	// After is the server's Retry-After, when it sent one.
	After time.Duration
	Err   error
}

func (e *WriteError) Error() string {
	if e.Status == 0 {
		return redact.Text(fmt.Sprintf("influx write: %v", e.Err))
	}
	return redact.Text(fmt.Sprintf("influx write: HTTP %d: %v", e.Status, e.Err))
}

func (e *WriteError) Unwrap() error { return e.Err }

// Write sends newline-separated lines in one request.
func (i *Influx) Write(ctx context.Context, lines []byte) error {
	body := strings.TrimRight(string(lines), "\n")
	if body == "" {
		return nil
	}
	err := i.w.WriteRecord(ctx, body)
	if err == nil {
		return nil
	}
	return classify(err)
}

func classify(err error) error {
	var he *ihttp.Error
	if !errors.As(err, &he) {
		return &WriteError{Retry: true, Err: err}
	}
	we := &WriteError{Status: he.StatusCode, Err: err, After: time.Duration(he.RetryAfter) * time.Second}
	switch s := he.StatusCode; {
	case s == 0, s == http.StatusTooManyRequests, s >= 500:
		we.Retry = true
	case s == http.StatusUnauthorized, s == http.StatusForbidden, s == http.StatusNotFound:
		we.Retry = true
	}
	return we
}

// Probe writes nothing: InfluxDB still checks the token and that the
// bucket exists, and stores nothing.
func (i *Influx) Probe(ctx context.Context) error {
	if err := i.w.WriteRecord(ctx, ""); err != nil {
		return classify(err)
	}
	return nil
}

// Ping checks that the server answers.
func (i *Influx) Ping(ctx context.Context) error {
	ok, err := i.client.Ping(ctx)
	if err != nil {
		return fmt.Errorf("influx %s: %w", i.url, err)
	}
	if !ok {
		return fmt.Errorf("influx %s: ping failed", i.url)
	}
	return nil
}

// Close releases the client's connections.
func (i *Influx) Close() { i.client.Close() }
