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

// InfluxConfig locates an InfluxDB and its bucket: the configuration's
// sink.influx, decoded by package config under these keys. For InfluxDB
// 1.8 the bucket is "database/retention-policy" and the token
// "user:password" or empty.
type InfluxConfig struct {
	URL    string `mapstructure:"url"`
	Org    string `mapstructure:"org"`
	Bucket string `mapstructure:"bucket"`
	// TokenFile is where the token is read from (config.InfluxToken);
	// NewInflux sends Token.
	TokenFile string        `mapstructure:"token_file"`
	Timeout   time.Duration `mapstructure:"timeout"`
	// GZip compresses writes of GZipMin bytes or more.
	GZip bool      `mapstructure:"gzip"`
	TLS  TLSConfig `mapstructure:"tls"`
	// Profile is how the window points' fields are written: "influx"
	// (strings as strings) or "numeric" (ParseProfile).
	Profile string `mapstructure:"profile"`

	// Token and UserAgent are filled by the caller, never by a
	// configuration file: the token read from TokenFile, and tpsmon's
	// name and version.
	Token     string `mapstructure:"-"`
	UserAgent string `mapstructure:"-"`
}

// TLSConfig secures the connection.
type TLSConfig struct {
	CAFile string `mapstructure:"ca_file"`
	// InsecureSkipVerify turns TLS certificate checks off.
	InsecureSkipVerify bool `mapstructure:"insecure_skip_verify"`
}

// Influx writes line protocol through influxdb-client-go's blocking write
// API, one request per call: no hidden buffer that could drop points.
type Influx struct {
	client influxdb2.Client
	w      api.WriteAPIBlocking
	// wz compresses (its client zc); nil without GZip. The two share one
	// connection pool.
	wz  api.WriteAPIBlocking
	zc  influxdb2.Client
	url string
}

// ClientConfig returns the TLS settings for a client of the InfluxDB, nil
// when the system's defaults serve: the writer and the InfluxQL client of
// report and rollup both use it, so a private CA works for all three.
func (t TLSConfig) ClientConfig() (*tls.Config, error) {
	if t.CAFile == "" && !t.InsecureSkipVerify {
		return nil, nil
	}
	tc := &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // the operator asked for it
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("influx tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("influx tls ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// GZipMin is the smallest write that is compressed. One window's points
// are a few KB: compressing them saves little and costs a new compressor
// of about 1 MB for each request (the client makes one per write), which
// was the daemon's largest allocation at rest. A backlog sent after an
// outage is large, and there compression pays.
const GZipMin = 64 << 10

// NewInflux returns a writer for cfg.
func NewInflux(cfg InfluxConfig) (*Influx, error) {
	tc, err := cfg.TLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	// Options hold pointers: each client gets its own.
	options := func() *influxdb2.Options {
		opts := influxdb2.DefaultOptions().
			SetPrecision(Precision).
			SetApplicationName(cfg.UserAgent)
		if cfg.Timeout > 0 {
			opts.SetHTTPRequestTimeout(uint(max(1, cfg.Timeout/time.Second)))
		}
		if tc != nil {
			opts.SetTLSConfig(tc)
		}
		return opts
	}
	c := influxdb2.NewClientWithOptions(cfg.URL, cfg.Token, options())
	in := &Influx{client: c, w: c.WriteAPIBlocking(cfg.Org, cfg.Bucket), url: redact.URL(cfg.URL)}
	if cfg.GZip {
		// The compressing client sends over the same HTTP client, so
		// both share their connections.
		zopts := options().SetUseGZip(true).SetHTTPClient(c.Options().HTTPClient())
		in.zc = influxdb2.NewClientWithOptions(cfg.URL, cfg.Token, zopts)
		in.wz = in.zc.WriteAPIBlocking(cfg.Org, cfg.Bucket)
	}
	return in, nil
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
	// Content is the writer's verdict that the points themselves are
	// refused (an OTLP receiver's 400, a spooled line the writer cannot
	// read): the Sender quarantines them as it does InfluxDB's parse
	// errors.
	Content bool
	// Op names the write in the message; "" is "influx write".
	Op string
}

func (e *WriteError) Error() string {
	op := e.Op
	if op == "" {
		op = "influx write"
	}
	if e.Status == 0 {
		return redact.Text(fmt.Sprintf("%s: %v", op, e.Err))
	}
	return redact.Text(fmt.Sprintf("%s: HTTP %d: %v", op, e.Status, e.Err))
}

func (e *WriteError) Unwrap() error { return e.Err }

// Write sends newline-separated lines in one request.
func (i *Influx) Write(ctx context.Context, lines []byte) error {
	body := strings.TrimRight(string(lines), "\n")
	if body == "" {
		return nil
	}
	w := i.w
	if i.wz != nil && len(body) >= GZipMin {
		w = i.wz
	}
	err := w.WriteRecord(ctx, body)
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
func (i *Influx) Close() {
	if i.zc != nil {
		i.zc.Close()
	}
	i.client.Close()
}
