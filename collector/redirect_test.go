package collector

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// TestScrapeFollowsNoRedirect: a server that answers its metrics page, or
// the model endpoint, with a redirect (to another port, or to a page of
// its own) fails the scrape with an error naming the Location, and
// nothing is read where it points.
func TestScrapeFollowsNoRedirect(t *testing.T) {
	page := readFixture(t, "v1_two_engines.prom")
	var elsewhere atomic.Int64 // requests the other server got
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if r.URL.Path == "/v1/models" {
			w.Write([]byte(`{"data":[{"id":"not-this-one"}]}`))
			return
		}
		w.Write([]byte(page))
	}))
	defer other.Close()
	for _, tc := range []struct {
		name string
		code int
		to   string // Location: "/..." on the same server, or on other
	}{
		{"302 to another port", http.StatusFound, other.URL + "/metrics"},
		{"301 to another port", http.StatusMovedPermanently, other.URL + "/metrics"},
		{"307 to another port", http.StatusTemporaryRedirect, other.URL + "/metrics"},
		{"308 to another port", http.StatusPermanentRedirect, other.URL + "/metrics"},
		{"303 to the same server", http.StatusSeeOther, "/real-metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			elsewhere.Store(0)
			var own atomic.Int64 // requests for the page redirected to
			mux := http.NewServeMux()
			mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, tc.to, tc.code) })
			mux.HandleFunc("/real-metrics", func(w http.ResponseWriter, r *http.Request) { own.Add(1); w.Write([]byte(page)) })
			srv := httptest.NewServer(mux)
			defer srv.Close()
			s := &Scraper{Server: "s", URL: srv.URL + "/metrics", Interval: time.Second}
			r := s.Scrape(context.Background())
			if !errors.Is(r.Err, ErrRedirect) {
				t.Fatalf("err %v, want %v", r.Err, ErrRedirect)
			}
			to := tc.to
			if strings.HasPrefix(to, "/") {
				to = srv.URL + to
			}
			if !strings.Contains(r.Err.Error(), to) {
				t.Errorf("err %q does not name the Location %s", r.Err, to)
			}
			if n := elsewhere.Load() + own.Load(); n > 0 || r.Sample.Counter[sample.GenerationTokens] != 0 {
				t.Errorf("%d requests where the redirect points; sample %+v", n, r.Sample)
			}
		})
	}
	t.Run("model endpoint", func(t *testing.T) {
		elsewhere.Store(0)
		mux := http.NewServeMux()
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte("llamacpp:tokens_predicted_total 10\nllamacpp:requests_processing 1\n"))
		})
		mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/v1/models", http.StatusFound)
		})
		srv := httptest.NewServer(mux)
		defer srv.Close()
		s := &Scraper{Server: "s", URL: srv.URL + "/metrics", Interval: time.Second}
		r := s.Scrape(context.Background())
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Sample.Model != "" || elsewhere.Load() > 0 {
			t.Errorf("model %q, %d requests to where the redirect points", r.Sample.Model, elsewhere.Load())
		}
	})
}
