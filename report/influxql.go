package report

import (
	"context"
	"errors"
	"fmt"
	"io"
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
}

// NewClient splits a bucket ("db/rp" or "db") for /query.
func NewClient(baseURL, bucket, token string, timeout time.Duration) *Client {
	db, rp, _ := strings.Cut(bucket, "/")
	return &Client{URL: strings.TrimRight(baseURL, "/"), DB: db, RP: rp, Token: token, HTTP: &http.Client{Timeout: timeout}}
}

// Query runs one InfluxQL statement; times come back as Unix seconds.
func (c *Client) Query(ctx context.Context, q string) ([]influxql.Series, error) {
	v := url.Values{"q": {q}, "db": {c.DB}, "epoch": {"s"}}
	if c.RP != "" {
		v.Set("rp", c.RP)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/query", strings.NewReader(v.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.Token != "" {
		req.Header.Set("Authorization", "Token "+c.Token)
	}
	sent := time.Now()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("influx query: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	answered := time.Now()
	series, err := influxql.Decode(body)
	record(ctx, sent, answered, time.Now(), len(body))
	if errors.Is(err, influxql.ErrUndecodable) {
		return nil, fmt.Errorf("influx query: HTTP %s: %.200s", resp.Status, body)
	}
	if err != nil {
		return nil, fmt.Errorf("influx query: %w", err)
	}
	return series, nil
}
