package report

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
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

// Series is one series of a result.
type Series struct {
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
	Columns []string          `json:"columns"`
	Values  [][]any           `json:"values"`
}

// Rows returns each row as a map of column to value.
func (s Series) Rows() []map[string]any {
	out := make([]map[string]any, len(s.Values))
	for i, v := range s.Values {
		m := make(map[string]any, len(v))
		for j, c := range s.Columns {
			m[c] = v[j]
		}
		out[i] = m
	}
	return out
}

// NewClient splits a bucket ("db/rp" or "db") for /query.
func NewClient(baseURL, bucket, token string, timeout time.Duration) *Client {
	db, rp, _ := strings.Cut(bucket, "/")
	return &Client{URL: strings.TrimRight(baseURL, "/"), DB: db, RP: rp, Token: token, HTTP: &http.Client{Timeout: timeout}}
}

// Query runs one InfluxQL statement; times come back as Unix seconds.
func (c *Client) Query(ctx context.Context, q string) ([]Series, error) {
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
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("influx query: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	var out struct {
		Results []struct {
			Series []Series `json:"series"`
			Error  string   `json:"error"`
		} `json:"results"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("influx query: HTTP %s: %.200s", resp.Status, body)
	}
	if out.Error != "" {
		return nil, fmt.Errorf("influx query: %s", out.Error)
	}
	if len(out.Results) == 0 {
		return nil, nil
	}
	if e := out.Results[0].Error; e != "" {
		return nil, fmt.Errorf("influx query: %s", e)
	}
	return out.Results[0].Series, nil
}

// Num reads a numeric cell of a result.
func Num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}
