package agent

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/sink"
)

// Daemon tests run in a testing/synctest bubble where they can: the
// daemon's tickers, timeouts and the test's own sleeps then run on the
// bubble's clock, which moves as soon as every goroutine waits, so seconds
// of windows take milliseconds and scrapes land exactly on their ticks.
// Sockets and file notifications never count as waiting, so inside a
// bubble the daemon serves no HTTP endpoint, reads servers through
// handlerClient and tells systemd through Options.Notify.

// bubbleConfig is configtest.Private without the HTTP endpoint.
func bubbleConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg := configtest.Private(t)
	cfg.HTTP.Listen = ""
	return cfg
}

// handlerClient is an HTTP client whose requests h answers in-process,
// in the caller's goroutine: no socket, nothing left running.
func handlerClient(h http.Handler) *http.Client {
	return &http.Client{Transport: handlerTransport{h}}
}

type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// notes records what the daemon tells systemd (Options.Notify).
type notes struct {
	mu   sync.Mutex
	msgs []string
	at   []time.Time // when each was told: the daemon's moment, not when a test looked
}

func (n *notes) send(state string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.msgs = append(n.msgs, state)
	n.at = append(n.at, time.Now())
	return nil
}

// told is when message i was told.
func (n *notes) told(i int) time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.at[i]
}

func (n *notes) len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.msgs)
}

// count counts the messages in [from, to) that start with prefix.
func (n *notes) count(from, to int, prefix string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, m := range n.msgs[from:to] {
		if strings.HasPrefix(m, prefix) {
			c++
		}
	}
	return c
}

// runOneServer runs the daemon in the test's bubble for d against one
// vLLM-format server served by h, with 500 ms windows and 50 ms scrapes,
// and returns the agent and the line protocol it wrote.
func runOneServer(t *testing.T, name string, h http.Handler, d time.Duration) (*Agent, string) {
	t.Helper()
	client := handlerClient(h)
	client.Timeout = time.Second
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace = 500*time.Millisecond, 100*time.Millisecond
	cfg.Servers = []config.ServerConfig{{Name: name, Engine: "vllm", MetricsURL: "http://" + name + "/metrics", GPUs: []string{"auto"}, ScrapeInterval: 50 * time.Millisecond}}
	var out bytes.Buffer
	a := newAgent(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(&out)}}, hooks{client: client})
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return a, out.String()
}
