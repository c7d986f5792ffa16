package report

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/internal/influxql"
)

// Client runs InfluxQL on /query: InfluxDB 1.8's own, and the 1.x
// compatibility API of 2.x and 3.x (with a DBRP mapping).
type Client struct {
	URL   string
	DB    string // the bucket's database part ("db" of "db/rp")
	RP    string
	Token string
	HTTP  *http.Client
	// Timeout bounds the wait for InfluxDB to begin its answer and, apart,
	// the reading of it: not the time an answer opened ahead waits for
	// the report's step that reads it. 0: none.
	Timeout time.Duration
}

// NewClient splits a bucket ("db/rp" or "db") for /query.
func NewClient(baseURL, bucket, token string, timeout time.Duration) *Client {
	db, rp, _ := strings.Cut(bucket, "/")
	return &Client{URL: strings.TrimRight(baseURL, "/"), DB: db, RP: rp, Token: token, HTTP: &http.Client{}, Timeout: timeout}
}

// maxAnswer bounds the bytes of one answer read.
const maxAnswer = 256 << 20

// Query runs one InfluxQL statement and returns its whole answer; times
// come back as Unix seconds.
func (c *Client) Query(ctx context.Context, q string) ([]influxql.Series, error) {
	a, err := c.Open(ctx, q)
	if err != nil {
		return nil, err
	}
	var out []influxql.Series
	if err := a.Each(func(s influxql.Series) error { out = append(out, s); return nil }); err != nil {
		return nil, err
	}
	return out, nil
}

// Answer is one query's answer, begun: InfluxDB has run the query and
// started to send it. Each reads it; Close drops it unread.
type Answer struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timer   *time.Timer // nil: no timeout
	timeout time.Duration
	status  string
	packed  bool // MessagePack, not JSON
	body    io.ReadCloser
	br      *bufio.Reader
	sent    time.Time
	began   time.Time
}

// errTimeout is the cause of an answer cut off by the client's Timeout.
var errTimeout = errors.New("InfluxDB too slow")

// Open sends one InfluxQL statement and returns once InfluxDB has begun
// to send its answer: InfluxDB 1.8 sends its headers before it runs the
// query and the answer's first byte after, so opening queries ahead runs
// them in InfluxDB while the caller reads others.
func (c *Client) Open(ctx context.Context, q string) (*Answer, error) {
	v := url.Values{"q": {q}, "db": {c.DB}, "epoch": {"s"}}
	if c.RP != "" {
		v.Set("rp", c.RP)
	}
	a := &Answer{timeout: c.Timeout}
	a.ctx, a.cancel = context.WithCancelCause(ctx)
	if c.Timeout > 0 {
		a.timer = time.AfterFunc(c.Timeout, func() {
			a.cancel(fmt.Errorf("%w (timeout %v)", errTimeout, c.Timeout))
		})
	}
	req, err := http.NewRequestWithContext(a.ctx, http.MethodPost, c.URL+"/query", strings.NewReader(v.Encode()))
	if err != nil {
		a.Close()
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	// MessagePack where the server speaks it (InfluxDB 1.x), else JSON:
	// the answer says which (Each).
	req.Header.Set("Accept", influxql.ContentTypeMsgpack+", application/json;q=0.9")
	if c.Token != "" {
		req.Header.Set("Authorization", "Token "+c.Token)
	}
	a.sent = time.Now()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		err = a.cause(err)
		a.Close()
		return nil, fmt.Errorf("influx query: %w", err)
	}
	a.status, a.body = resp.Status, resp.Body
	a.packed = mediaType(resp.Header.Get("Content-Type")) == influxql.ContentTypeMsgpack
	a.br = bufio.NewReaderSize(resp.Body, 32<<10)
	if _, err := a.br.Peek(1); err != nil && !errors.Is(err, io.EOF) {
		err = a.cause(err)
		a.Close()
		return nil, fmt.Errorf("influx query: %w", err)
	}
	a.began = time.Now()
	if a.timer != nil {
		a.timer.Stop() // the wait for the reader's turn is not InfluxDB's
	}
	return a, nil
}

// cause is err, or the reason the answer's context ended (its timeout,
// the caller's cancellation) when it did.
func (a *Answer) cause(err error) error {
	if c := context.Cause(a.ctx); c != nil {
		return c
	}
	return err
}

// Each reads the answer, handing each series of it to each as it decodes
// (influxql.Each), and closes it. An error of each is returned as it is.
func (a *Answer) Each(each func(influxql.Series) error) error {
	defer a.Close()
	start := time.Now()
	if a.timer != nil {
		a.timer.Reset(a.timeout)
	}
	var head bytes.Buffer // the first bytes, to show a body that is no answer
	n := &countingReader{r: io.TeeReader(a.br, &limitedBuffer{&head, 200})}
	var eachErr error
	read := influxql.Each
	if a.packed {
		read = influxql.EachMsgpack
	}
	err := read(n, func(s influxql.Series) error {
		eachErr = each(s)
		return eachErr
	})
	record(a.ctx, a.sent, a.began, start, time.Now(), n.n)
	switch {
	case err == nil:
		return nil
	case eachErr != nil:
		return eachErr
	case context.Cause(a.ctx) != nil:
		return fmt.Errorf("influx query: %w", context.Cause(a.ctx))
	case errors.Is(err, errTooBig):
		return fmt.Errorf("influx query: %w", errTooBig)
	case errors.Is(err, influxql.ErrUndecodable):
		return fmt.Errorf("influx query: HTTP %s: %.200s", a.status, head.Bytes())
	}
	return fmt.Errorf("influx query: %w", err)
}

// mediaType is a Content-Type without its parameters.
func mediaType(ct string) string {
	t, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ""
	}
	return t
}

// Close drops the answer; reading it after is an error.
func (a *Answer) Close() {
	if a.timer != nil {
		a.timer.Stop()
	}
	if a.body != nil {
		a.body.Close()
	}
	a.cancel(nil)
}

// errTooBig ends an answer over maxAnswer bytes: rather no report than
// one of a cut answer.
var errTooBig = fmt.Errorf("answer over %d MiB", maxAnswer>>20)

// countingReader counts the bytes read and stops at maxAnswer.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n >= maxAnswer {
		return 0, errTooBig
	}
	n, err := c.r.Read(p[:min(len(p), maxAnswer-c.n)])
	c.n += n
	return n, err
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
