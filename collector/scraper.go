// Package collector reads token throughput from inference servers: it
// scrapes their Prometheus metrics and parses their logs, and turns each
// into timestamped samples (package sample). Sources only produce samples;
// windows are the joiner's job.
package collector

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/internal/redact"
	"github.com/tpsmon/tpsmon/internal/wake"
	"github.com/tpsmon/tpsmon/sample"
)

// ErrMalformed marks metrics text that could not be parsed; the scrape is
// skipped and counted, the daemon goes on.
var ErrMalformed = errors.New("malformed metrics text")

// ErrNoEngineMetrics marks a metrics page that parsed but carries none of
// the engine's throughput series (wrong engine, or stats logging off).
var ErrNoEngineMetrics = errors.New("no engine throughput metrics")

// Result is the outcome of one scrape: a sample, or the error that kept the
// server from being read.
type Result struct {
	Server string
	Sample sample.Server
	Err    error
	// Facts is what the engine said of its model, when it said something
	// new (llama.cpp /props and /v1/models, vLLM cache_config_info).
	Facts *EngineFacts
	// Held is the histograms of a page scraped earlier and held unread
	// (Scraper.Window), at that page's time: taken before Sample.
	Held *sample.Server
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
	// Window, when set, is the windows' length. A window needs the
	// growth of the latency histograms over it, not each second's, and
	// their buckets are most of a page's lines. So they are read on the
	// first page of each window (and the first after a failed scrape),
	// and with it on the page scraped just before, held unread until
	// then: the two readings bracket the window's edge as reading every
	// page does, and the growth between them is the same. The pages
	// between are read without them (sample.Server.HistsHeld). Zero reads
	// them on every page.
	Window time.Duration

	deriver Deriver
	// model is what the engine's model endpoint said, asked again every
	// modelEvery (a server may be restarted with another model).
	model   string
	modelAt time.Time
	// facts is what the engine last said of its model, asked every
	// modelEvery too; pageFacts what this scrape's page said.
	facts     EngineFacts
	factsAt   time.Time
	wantPage  bool
	pageFacts EngineFacts
	// cache knows the series of this server's earlier pages; body is the
	// last page's buffer, reused.
	cache seriesCache
	body  bytes.Buffer
	// unhist reads the pages whose histograms are left unread. histAt is
	// when the last page read in full was asked for (zero: read the next
	// in full). held is the last page left unread and heldAt its
	// sample's time (zero: none held), kept until a page is read in full
	// or the scraper stops (Held).
	unhist seriesCache
	histAt time.Time
	held   bytes.Buffer
	heldAt time.Time
	// req is the page's request, made once (the URL and headers are not
	// parsed and built again every second); sent is its copy bound to the
	// deadline's context, made again only with a new context.
	req, sent *http.Request
	deadline  deadline
	// page is the page's own connection when leanPage allows it (made
	// with req); nil sends req through the client's transport.
	page *pageConn
}

// modelEvery is how often a server's model endpoint is asked.
const modelEvery = time.Minute

// maxPage bounds a metrics page: a server that streams without end must
// not grow tpsmon's memory.
const maxPage = 32 << 20

// Run scrapes every Interval until ctx ends, handing each result to emit.
func (s *Scraper) Run(ctx context.Context, emit func(Result)) {
	t := wake.NewTicker(s.Interval)
	defer t.Stop()
	defer s.release()
	for {
		emit(s.scrape(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			t.Next()
		}
	}
}

// Scrape reads the endpoint once. The sample's time is the middle of the
// request, the best estimate of when the server rendered the page.
func (s *Scraper) Scrape(ctx context.Context) Result {
	// One scrape keeps no context registered with ctx, which may outlive
	// the scraper (a probe of each port during discovery), nor a
	// connection.
	defer s.release()
	return s.scrape(ctx)
}

// release ends what a scraper keeps between scrapes: the deadline's
// context and timer, the page's connection.
func (s *Scraper) release() {
	s.deadline.release()
	s.page.close()
}

// scrape is Scrape keeping the request's deadline for the next (Run).
func (s *Scraper) scrape(ctx context.Context) Result {
	now := s.Now
	if now == nil {
		now = time.Now
	}
	client := s.Client
	if client == nil {
		client = NewClient(s.Interval)
	}
	res := Result{Server: s.Server}
	start := now()
	s.wantPage = start.Sub(s.factsAt) >= modelEvery
	full := s.readsHists(start)
	if full {
		// Before this page: it is read with the same cache.
		res.Held = s.readHeld()
	}
	smp, err := s.fetch(ctx, client, full)
	end := now()
	if err != nil {
		// The next attempt reads in full, and the page held before it.
		s.histAt = time.Time{}
		res.Err = fmt.Errorf("scrape %s (%s): %w", s.Server, redact.URL(s.URL), err)
		return res
	}
	smp.Time = start.Add(end.Sub(start) / 2)
	if smp.Model == "" && s.Dialect.ModelPath != "" {
		if end.Sub(s.modelAt) >= modelEvery {
			s.modelAt = end
			if m, err := s.fetchModel(ctx, client); err == nil && m != "" {
				s.model = m
			}
		}
		smp.Model = s.model
	}
	if s.wantPage {
		s.factsAt = end
		if f, ok := s.engineFacts(ctx, client); ok && f != s.facts {
			s.facts = f
			res.Facts = &f
		}
	}
	res.Sample = s.deriver.Derive(smp)
	switch {
	case res.Sample.Suspect || !res.Sample.Rewind.IsZero():
		// The counters are in doubt since Rewind (several servers behind
		// one URL): a page held from before may be another's too, and the
		// joiner starts anew from the next page, read in full.
		s.heldAt, s.histAt = time.Time{}, time.Time{}
	case full:
		s.histAt = start
	default:
		// Kept for the next full read.
		res.Sample.HistsHeld = true
		s.held, s.body = s.body, s.held
		s.heldAt = res.Sample.Time
	}
	return res
}

// readsHists says whether the page asked for at start is read with its
// histograms (Window): the first of a window, or after a failure.
func (s *Scraper) readsHists(start time.Time) bool {
	if s.Window <= 0 || s.Dialect == nil || s.histAt.IsZero() {
		return true
	}
	return wake.Slot(start, s.Window) != wake.Slot(s.histAt, s.Window)
}

// readHeld reads the histograms of the page held unread, at its time; nil
// when none is held or it reads no histogram.
func (s *Scraper) readHeld() *sample.Server {
	if s.heldAt.IsZero() {
		return nil
	}
	at := s.heldAt
	s.heldAt = time.Time{}
	smp, _, err := readPage(s.held.Bytes(), s.Dialect, &s.cache)
	if err != nil {
		return nil // read once already, without its histograms: not again
	}
	if !slices.Contains(smp.HasHist[:], true) {
		return nil
	}
	return &sample.Server{Time: at, Engine: smp.Engine, Hists: smp.Hists, HasHist: smp.HasHist}
}

// Held returns the histograms of the page held unread (Window) once the
// scraper stopped: the time since the last full read is not lost when
// the daemon stops or reloads. Call it only after Run returned.
func (s *Scraper) Held() (sample.Server, bool) {
	if h := s.readHeld(); h != nil {
		return *h, true
	}
	return sample.Server{}, false
}

// engineFacts is what the engine says of its model: llama-server's
// /props and /v1/models, vLLM's cache_config_info on the page just read.
func (s *Scraper) engineFacts(ctx context.Context, client *http.Client) (EngineFacts, bool) {
	switch s.Dialect {
	case &LlamaCPP:
		f, err := ProbeLlamaCpp(ctx, client, s.URL)
		return f, err == nil && f.Said()
	case &VLLM:
		return s.pageFacts, s.pageFacts.Said()
	}
	return EngineFacts{}, false
}

// fetchModel asks the server which model it serves, at the dialect's
// ModelPath beside the metrics endpoint.
func (s *Scraper) fetchModel(ctx context.Context, client *http.Client) (string, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return "", err
	}
	u.Path, u.RawQuery = s.Dialect.ModelPath, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return "", fmt.Errorf("%s: HTTP %s", u, resp.Status)
	}
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"` // OpenAI /v1/models
		ModelID string `json:"model_id"` // TGI /info
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return "", fmt.Errorf("%s: %w", u, err)
	}
	m := body.ModelID
	if len(body.Data) > 0 {
		m = body.Data[0].ID
	}
	// llama-server names a model by its file unless given an alias.
	if strings.HasSuffix(m, ".gguf") {
		m = strings.TrimSuffix(path.Base(m), ".gguf")
	}
	return m, nil
}

// fetch asks for the page and reads it, with its histograms when full.
func (s *Scraper) fetch(ctx context.Context, client *http.Client, full bool) (sample.Server, error) {
	if s.req == nil {
		req, err := http.NewRequest(http.MethodGet, s.URL, nil)
		if err != nil {
			return sample.Server{}, err
		}
		req.Header.Set("Accept", "text/plain;version=0.0.4")
		s.req = req
		s.page, _ = leanPage(client, req)
	}
	var body []byte
	var err error
	if s.page != nil {
		body, err = s.page.get(ctx, s.req, client.Timeout, &s.body)
	} else {
		body, err = s.readTransport(ctx, client)
	}
	if err != nil {
		return sample.Server{}, err
	}
	if s.wantPage {
		s.pageFacts, _ = CacheConfigInfo(body)
	}
	if s.body.Cap() > 4*max(s.body.Len(), 64<<10) {
		s.body = bytes.Buffer{} // one huge page does not stay for good
	}
	cache := &s.cache
	if !full {
		s.unhist.unhist = true
		cache = &s.unhist
	}
	smp, d, err := readPage(body, s.Dialect, cache)
	if s.Dialect == nil && d != nil {
		s.Dialect = d
		if s.Detected != nil {
			s.Detected(d.Engine)
		}
	}
	return smp, err
}

// readTransport sends the page's request through the client's transport,
// bound by its Timeout, and reads its body into s.body.
func (s *Scraper) readTransport(ctx context.Context, client *http.Client) ([]byte, error) {
	reqCtx, renewed := s.deadline.start(ctx, client.Timeout)
	if renewed || s.sent == nil {
		s.sent = s.req.WithContext(reqCtx)
	}
	body, err := s.read(client)
	if s.deadline.stop() && err != nil {
		// A path of the transport that says only that the context ended.
		err = s.deadline.cause
	}
	return body, err
}

// read sends the page's request and reads its body into s.body.
func (s *Scraper) read(client *http.Client) ([]byte, error) {
	resp, err := roundTrip(client, s.sent)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	s.body.Reset()
	if _, err := s.body.ReadFrom(io.LimitReader(resp.Body, maxPage)); err != nil {
		return nil, err
	}
	return s.body.Bytes(), nil
}

// NewClient returns the HTTP client scrapes use. Its connections keep the
// default 4 KB read buffer: a page's body is read straight into the
// scraper's own buffer once the headers are in (bufio hands reads larger
// than its buffer to the socket), so a bigger one saved about 4 µs a
// scrape of an 8 KB page (BenchmarkScrape) and held 60 KB more of live
// heap per server, for as long as the daemon runs.
//
// It follows no redirect (RefuseRedirect). A scraper reads a plain-HTTP
// page on its own connection (pageConn), with the client's Timeout.
func NewClient(timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	return &http.Client{Timeout: timeout, Transport: &scrapeTransport{t}, CheckRedirect: RefuseRedirect}
}

// scrapeTransport is NewClient's: net/http's, which a scraper leaves for
// its page's own connection where leanPage allows.
type scrapeTransport struct{ *http.Transport }

// ErrRedirect is a server's answer that sends tpsmon elsewhere.
var ErrRedirect = errors.New("redirect not followed")

// roundTrip sends a page's request through the client's transport alone,
// with what of Client.Do a scrape needs: no redirect followed
// (RefuseRedirect's error), the client's Timeout (the scraper's
// deadline). At 1 Hz Client.Do's own work was a third of a
// scrape's HTTP CPU in bench S1's profile (its redirect bookkeeping copies
// the headers, its Timeout arms a timer and wraps the body in another).
func roundTrip(client *http.Client, req *http.Request) (*http.Response, error) {
	rt := client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := redirected(resp); err != nil {
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// redirected is the error of an answer that redirects (RefuseRedirect's),
// nil for any other or one without a Location.
func redirected(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect,
		http.StatusPermanentRedirect:
		if to, err := resp.Location(); err == nil {
			return redirectError(resp.StatusCode, to)
		}
	}
	return nil
}

// deadline bounds each of a scraper's requests by the client's Timeout
// with one context and one timer, kept from scrape to scrape until a
// request runs out of time or the scraper's context changes. A
// context.WithTimeout per scrape (a context registered with its parent, a
// timer, a request bound to it) was 3 % of the steady daemon's CPU in bench
// S1, its memory cold at one scrape a second.
type deadline struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	// timeout is the timer's duration; cause says it ran out, made once
	// per timeout.
	timeout time.Duration
	cause   error
}

// start arms the deadline for one request within parent and returns the
// request's context; renewed when it is not the last request's.
func (d *deadline) start(parent context.Context, timeout time.Duration) (ctx context.Context, renewed bool) {
	if d.ctx == nil || d.parent != parent || d.timeout != timeout || d.ctx.Err() != nil {
		if d.cancel != nil {
			d.cancel(nil)
		}
		d.parent, d.timeout, d.timer = parent, timeout, nil
		d.ctx, d.cancel = context.WithCancelCause(parent)
		if timeout > 0 { // none when 0, as an http.Client's Timeout says
			d.cause = clientTimeout(timeout)
			cancel, cause := d.cancel, d.cause
			d.timer = time.AfterFunc(timeout, func() { cancel(cause) })
		}
		return d.ctx, true
	}
	if d.timer != nil {
		d.timer.Reset(timeout)
	}
	return d.ctx, false
}

// stop disarms the deadline after a request; true when it had run out
// (its context is cancelled, or about to be, and the next request gets
// another).
func (d *deadline) stop() (expired bool) {
	if d.timer == nil || d.timer.Stop() {
		return false
	}
	d.ctx = nil
	return true
}

// release ends the deadline's context and timer.
func (d *deadline) release() {
	if d.timer != nil {
		d.timer.Stop()
	}
	if d.cancel != nil {
		d.cancel(nil)
	}
	*d = deadline{}
}

// clientTimeout is the cause of a scrape's deadline: the client's Timeout
// ran out. Its message is made when read, not by fmt.Errorf at every
// scrape, where it was 2 % of the steady daemon's CPU (bench S1); the
// deadline keeps one, as boxing it anew was a fifth of that.
type clientTimeout time.Duration

func (t clientTimeout) Error() string {
	return fmt.Sprintf("no whole answer within the client Timeout of %v: %v", time.Duration(t), context.DeadlineExceeded)
}

func (clientTimeout) Unwrap() error { return context.DeadlineExceeded }

// RefuseRedirect is the CheckRedirect of every client tpsmon reads servers
// (and its own endpoint) with: a metrics_url names the page itself, and a
// redirect, even to the same host, would let whoever answers on the port
// point tpsmon at another server's numbers, or at any URL. The error
// names the Location.
func RefuseRedirect(req *http.Request, _ []*http.Request) error {
	code := 0
	if req.Response != nil {
		code = req.Response.StatusCode
	}
	return redirectError(code, req.URL)
}

func redirectError(code int, to *url.URL) error {
	return fmt.Errorf("%w: HTTP %d to Location %s (the URL must name the page itself)", ErrRedirect, code, redact.URL(to.String()))
}
