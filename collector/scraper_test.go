package collector

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

func TestScrape(t *testing.T) {
	page := readFixture(t, "v1_two_engines.prom")
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr error  // errors.Is target, or nil
		errText string // substring of the error
	}{
		{"ok", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(page)) }, nil, ""},
		{"server error", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }, nil, "HTTP 500"},
		{"malformed", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(readFixture(t, "malformed.prom"))) }, ErrMalformed, ""},
		{"not an engine", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("go_goroutines 7\n")) }, ErrNoEngineMetrics, ""},
		{"too slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(300 * time.Millisecond) },
			context.DeadlineExceeded, "no whole answer within the client Timeout of 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			clock := time.Unix(100, 0)
			s := &Scraper{Server: "s", URL: srv.URL, Interval: time.Second, Dialect: &VLLM,
				Client: &http.Client{Timeout: 100 * time.Millisecond},
				Now:    func() time.Time { clock = clock.Add(time.Second); return clock }}
			r := s.Scrape(context.Background())
			if tt.wantErr == nil && tt.errText == "" {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				// Timestamped in the middle of the request (clock 101 -> 102).
				if !r.Sample.Time.Equal(time.Unix(101, 500_000_000)) || r.Sample.Counter[sample.GenerationTokens] != 1500 {
					t.Errorf("sample %+v", r.Sample)
				}
				return
			}
			if r.Err == nil {
				t.Fatal("no error")
			}
			if tt.wantErr != nil && !errors.Is(r.Err, tt.wantErr) {
				t.Errorf("err %v, want %v", r.Err, tt.wantErr)
			}
			if !strings.Contains(r.Err.Error(), tt.errText) || !strings.Contains(r.Err.Error(), srv.URL) {
				t.Errorf("err %q should name the URL and %q", r.Err, tt.errText)
			}
		})
	}
}

// TestDeadlineAcrossScrapes: one context and timer serve a scraper's
// requests until one runs out of time; each request still gets the whole
// Timeout from its own start, one that ran out is reported as such however
// the transport ended it, and the next request is bound anew and can
// succeed. A cancelled scraper context is not a timeout. Scrape, called
// once, keeps nothing registered with its context.
func TestDeadlineAcrossScrapes(t *testing.T) {
	page := readFixture(t, "v1_two_engines.prom")
	// Each answer's delay: 60 ms twice in a row would exceed the Timeout
	// of 100 ms, were it counted from the first request.
	const (
		fast      = 60 * time.Millisecond
		slowHead  = -1 // the headers come too late
		slowBody  = -2 // the headers at once, the body too late
		cancelled = -3 // the scraper's own context is cancelled
	)
	steps := []time.Duration{fast, fast, slowHead, fast, fast, slowBody, fast, cancelled, fast}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := time.Duration(0) // past the steps: at once
		if i := n.Add(1) - 1; i < int64(len(steps)) {
			d = steps[i]
		}
		switch d {
		case slowHead:
			time.Sleep(300 * time.Millisecond)
		case slowBody:
			w.Write([]byte(page[:len(page)/2]))
			w.(http.Flusher).Flush()
			time.Sleep(300 * time.Millisecond)
			w.Write([]byte(page[len(page)/2:]))
		default:
			time.Sleep(d)
			w.Write([]byte(page))
		}
	}))
	defer srv.Close()
	s := &Scraper{Server: "s", URL: srv.URL, Interval: time.Second, Dialect: &VLLM,
		Client: &http.Client{Timeout: 100 * time.Millisecond}}
	// The request is bound to a new context only first, after a timeout,
	// and when Scrape is given another context.
	var bound *http.Request
	renew := true
	for i, d := range steps {
		ctx := context.Background()
		if d == cancelled {
			c, cancel := context.WithCancel(ctx)
			cancel()
			ctx = c
			renew = true
		}
		r := s.scrape(ctx) // as Run does: the deadline is kept
		switch d {
		case slowHead, slowBody:
			if !errors.Is(r.Err, context.DeadlineExceeded) || !strings.Contains(fmt.Sprint(r.Err), "within the client Timeout of 100ms") {
				t.Errorf("step %d: err %v, want the client Timeout", i, r.Err)
			}
		case cancelled:
			if r.Err == nil || errors.Is(r.Err, context.DeadlineExceeded) {
				t.Errorf("step %d: err %v, want the scraper's context cancelled", i, r.Err)
			}
		default:
			if r.Err != nil {
				t.Errorf("step %d: %v", i, r.Err)
			}
		}
		if got := s.sent != bound; got != renew {
			t.Errorf("step %d: request bound anew %v, want %v", i, got, renew)
		}
		bound = s.sent
		renew = d == slowHead || d == slowBody || d == cancelled
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	if r := s.Scrape(parent); r.Err != nil {
		t.Fatal(r.Err)
	}
	if s.deadline.ctx != nil || s.deadline.timer != nil {
		t.Error("Scrape left its request's context or timer behind")
	}
}

func TestRunStopsWithContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("vllm:generation_tokens_total 1\n"))
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Scraper{Server: "s", URL: srv.URL, Interval: 10 * time.Millisecond, Dialect: &VLLM}
	n := 0
	done := make(chan struct{})
	go func() {
		s.Run(ctx, func(Result) {
			if n++; n == 3 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop after its context ended")
	}
}

// llama.cpp's metrics name no model: the scraper asks /v1/models beside
// them, from the first scrape.
func TestScrapeNamesTheModel(t *testing.T) {
	cases := []struct {
		name, models, want string
	}{
		{"file name", `{"object":"list","data":[{"id":"/models/tiny-llama.gguf","object":"model"}]}`, "tiny-llama"},
		{"alias", `{"data":[{"id":"qwen3-8b"}]}`, "qwen3-8b"},
		{"no answer", `not json`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
				w.Write([]byte("llamacpp:tokens_predicted_total 10\nllamacpp:requests_processing 1\n"))
			})
			mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(c.models)) })
			srv := httptest.NewServer(mux)
			defer srv.Close()
			s := &Scraper{Server: "s", URL: srv.URL + "/metrics", Interval: time.Second}
			r := s.Scrape(context.Background())
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Sample.Model != c.want || r.Sample.Engine != "llamacpp" {
				t.Errorf("engine %q model %q, want llamacpp and %q", r.Sample.Engine, r.Sample.Model, c.want)
			}
		})
	}
}

// TestScrapesShareOneRequest: the request made for the first scrape is
// sent again, headers and all, each time with that scrape's context: a
// cancelled one fails its scrape and does not stay with the request.
func TestScrapesShareOneRequest(t *testing.T) {
	page := readFixture(t, "v1_two_engines.prom")
	var accepts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accepts = append(accepts, r.Header.Get("Accept"))
		w.Write([]byte(page))
	}))
	defer srv.Close()
	s := &Scraper{Server: "s", URL: srv.URL, Interval: time.Second, Dialect: &VLLM, Client: NewClient(5 * time.Second)}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for i, ctx := range []context.Context{context.Background(), context.Background(), cancelled, context.Background()} {
		r := s.Scrape(ctx)
		if ctx == cancelled {
			if !errors.Is(r.Err, context.Canceled) {
				t.Fatalf("scrape %d with a cancelled context: err %v, want context.Canceled", i, r.Err)
			}
			continue
		}
		if r.Err != nil || r.Sample.Counter[sample.GenerationTokens] != 1500 {
			t.Fatalf("scrape %d: err %v, sample %+v", i, r.Err, r.Sample)
		}
	}
	if len(accepts) != 3 {
		t.Fatalf("%d requests reached the server, want 3", len(accepts))
	}
	for i, a := range accepts {
		if a != "text/plain;version=0.0.4" {
			t.Errorf("request %d: Accept %q", i, a)
		}
	}
}
