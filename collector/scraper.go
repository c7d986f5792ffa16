package collector

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Result is the outcome of one scrape: a sample, or the error that kept the
// server from being read.
type Result struct {
	Server string
	Sample Sample
	Err    error
}

// Scraper polls one server's metrics endpoint.
type Scraper struct {
	Server   string
	URL      string
	Interval time.Duration
	// Dialect reads the pages; nil detects the engine from the first page
	// that names one, and keeps it.
	Dialect *Dialect
	Client  *http.Client
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Detected is told the engine auto-detection chose.
	Detected func(engine string)

	deriver Deriver
}

// maxPage bounds a metrics page: a server that streams without end must
// not grow tpsmon's memory.
const maxPage = 32 << 20

// Run scrapes every Interval until ctx ends, handing each result to emit.
func (s *Scraper) Run(ctx context.Context, emit func(Result)) {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		emit(s.Scrape(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scrape reads the endpoint once. The sample's time is the middle of the
// request, the best estimate of when the server rendered the page.
func (s *Scraper) Scrape(ctx context.Context) Result {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	client := s.Client
	if client == nil {
		client = &http.Client{Timeout: s.Interval}
	}
	res := Result{Server: s.Server}
	start := now()
	smp, err := s.fetch(ctx, client)
	end := now()
	if err != nil {
		res.Err = fmt.Errorf("scrape %s (%s): %w", s.Server, s.URL, err)
		return res
	}
	smp.Time = start.Add(end.Sub(start) / 2)
	res.Sample = s.deriver.Derive(smp)
	return res
}

func (s *Scraper) fetch(ctx context.Context, client *http.Client) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return Sample{}, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return Sample{}, fmt.Errorf("HTTP %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPage))
	if err != nil {
		return Sample{}, err
	}
	var page Page
	if s.Dialect != nil {
		page, err = s.Dialect.ParseFiltered(body)
	} else {
		page, err = ParsePage(bytes.NewReader(body)) // detection needs every name
	}
	if err != nil {
		return Sample{}, err
	}
	if s.Dialect == nil {
		d, err := Detect(page)
		if err != nil {
			return Sample{}, err
		}
		s.Dialect = d
		if s.Detected != nil {
			s.Detected(d.Engine)
		}
	}
	smp, err := s.Dialect.Read(page)
	smp.Engine = s.Dialect.Engine
	return smp, err
}
