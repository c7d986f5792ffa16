package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/gpusim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/testkit/syncbuf"
)

// The attacks of issue 28 on counters, as measured there: 2 s windows, a
// vLLM at 100 tokens/s in all, so 200 tokens a window; scrapes every
// 250 ms. Each runs the daemon's pipeline in a bubble (bubble_test.go).
const (
	hostileWindow = 2 * time.Second
	hostileRate   = 100.0 // tokens/s, the truth
	hostileWhole  = 200   // tokens in a whole window
)

// hostileVLLM prints a vLLM page whose generation counter and waiting gauge
// are what page says at the time since start (n counts pages from 0); a
// zero start is the first page's time. served is when each page was made.
type hostileVLLM struct {
	start  time.Time
	page   func(since time.Duration, n int) (gen float64, waiting, kv string)
	mu     sync.Mutex
	n      int
	served []time.Time
}

func (h *hostileVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	now := time.Now()
	if h.start.IsZero() {
		h.start = now
	}
	gen, waiting, kv := h.page(now.Sub(h.start), h.n)
	h.n++
	if r.URL.Path == "/metrics" {
		h.served = append(h.served, now)
	}
	h.mu.Unlock()
	fmt.Fprintf(w, "vllm:generation_tokens_total{model_name=\"m\"} %s\n"+
		"vllm:num_requests_running{model_name=\"m\"} 4\nvllm:num_requests_waiting{model_name=\"m\"} %s\n"+
		"vllm:kv_cache_usage_perc{model_name=\"m\"} %s\n", strconv.FormatFloat(gen, 'f', 3, 64), waiting, kv)
}

// hostileWindowOut is one server window as written in line protocol.
type hostileWindowOut struct {
	start     time.Time
	tokens    int64 // -1: absent
	coverage  float64
	state     string
	kv        string // as written; "" when absent
	waiting   string
	hasTokens bool
}

var (
	lpCoverage = regexp.MustCompile(`coverage=([0-9.e+-]+)`)
	lpState    = regexp.MustCompile(`state="([a-z_]+)"`)
	lpKV       = regexp.MustCompile(`kv_cache_usage=([^,\s]+)`)
	lpWaiting  = regexp.MustCompile(`waiting=([^,\s]+)`)
	lpTime     = regexp.MustCompile(` (\d+)$`)
)

// runHostile runs the daemon against h for d with the attack's windows and
// returns the server windows written, the agent and its log.
func runHostile(t *testing.T, h http.Handler, d time.Duration) ([]hostileWindowOut, *Agent, string) {
	t.Helper()
	client := handlerClient(h)
	client.Timeout = time.Second
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace = hostileWindow, time.Second
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: "http://llm/metrics",
		GPUs: []string{"auto"}, ScrapeInterval: 250 * time.Millisecond}}
	var out bytes.Buffer
	var logs syncbuf.Buffer
	a := newAgent(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(&out)},
		Log: slog.New(slog.NewTextHandler(&logs, nil))}, hooks{client: client})
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	var ws []hostileWindowOut
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(line, "tpsmon_server,") {
			continue
		}
		w := hostileWindowOut{tokens: -1}
		if m := tokensRe.FindStringSubmatch(line); m != nil {
			w.tokens, _ = strconv.ParseInt(m[1], 10, 64)
			w.hasTokens = true
		}
		if m := lpCoverage.FindStringSubmatch(line); m != nil {
			w.coverage, _ = strconv.ParseFloat(m[1], 64)
		}
		if m := lpState.FindStringSubmatch(line); m != nil {
			w.state = m[1]
		}
		if m := lpKV.FindStringSubmatch(line); m != nil {
			w.kv = m[1]
		}
		if m := lpWaiting.FindStringSubmatch(line); m != nil {
			w.waiting = m[1]
		}
		if m := lpTime.FindStringSubmatch(line); m != nil {
			ns, _ := strconv.ParseInt(m[1], 10, 64)
			w.start = time.Unix(0, ns)
		}
		ws = append(ws, w)
	}
	if len(ws) < 4 {
		t.Fatalf("%d server windows:\n%s", len(ws), out.String())
	}
	return ws, a, logs.String()
}

func discardsOf(a *Agent) map[sample.Reason]uint64 {
	got := map[sample.Reason]uint64{}
	a.metrics.discards.Each(func(_ string, r sample.Reason, n uint64) { got[r] += n })
	return got
}

func describe(ws []hostileWindowOut) string {
	var b strings.Builder
	for i, w := range ws {
		fmt.Fprintf(&b, "  %d: tokens=%d coverage=%.3f state=%s waiting=%s kv=%s\n", i, w.tokens, w.coverage, w.state, w.waiting, w.kv)
	}
	return b.String()
}

// replicaLeft is the count of the replica that stays, one of k sharing
// the load until 14 s and alone after.
func replicaLeft(since time.Duration, k float64) float64 {
	shared := min(since, 14*time.Second).Seconds()
	return hostileRate/k*shared + hostileRate*max(0, since.Seconds()-shared)
}

// TestHostileCounters: counters that cannot be one process's never become
// tokens. Every window holds at most what the server made in it (a
// scrape's worth of slack for where the edge falls), the untrusted span
// is a hole (coverage below 1), and the server is marked suspect, counted
// and logged once per episode.
func TestHostileCounters(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		page func(since time.Duration, n int, rng *rand.Rand) float64
		// from, to: when the counter misbehaves
		from, to time.Duration
	}{
		// Two replicas behind one URL, near 5,000 and 20,000, each making
		// half the tokens; a random one answers each scrape.
		{"two replicas", func(since time.Duration, n int, rng *rand.Rand) float64 {
			if since >= 4*time.Second && since < 14*time.Second && rng.IntN(2) == 1 {
				return 20000 + hostileRate/2*since.Seconds()
			}
			return 5000 + replicaLeft(since, 2)
		}, 4 * time.Second, 14 * time.Second},
		// A counter that flaps upward: g and g + 3000 on alternate scrapes.
		{"up-flap", func(since time.Duration, n int, _ *rand.Rand) float64 {
			g := 1000 + hostileRate*since.Seconds()
			if since >= 4*time.Second && since < 14*time.Second && n%2 == 1 {
				g += 3000
			}
			return g
		}, 4 * time.Second, 14 * time.Second},
		// Three replicas, one of them far below the others.
		{"three replicas", func(since time.Duration, n int, rng *rand.Rand) float64 {
			if since >= 4*time.Second && since < 14*time.Second {
				if i := rng.IntN(3); i > 0 {
					return []float64{0, 1e6, 2e4}[i] + hostileRate/3*since.Seconds()
				}
			}
			return 300000 + replicaLeft(since, 3)
		}, 4 * time.Second, 14 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(28, 1))
				h := &hostileVLLM{start: time.Now(), page: func(since time.Duration, n int) (float64, string, string) {
					return tc.page(since, n, rng), "1", "0.5"
				}}
				ws, a, logs := runHostile(t, h, 24*time.Second)
				t.Logf("windows:\n%s", describe(ws))
				sum := int64(0)
				holes := 0
				for i, w := range ws {
					if w.tokens > hostileWhole+hostileWhole/10 {
						t.Errorf("window %d: %d tokens, the server made at most %d:\n%s", i, w.tokens, hostileWhole, describe(ws))
					}
					if w.hasTokens {
						sum += w.tokens
					}
					if i > 0 && i < len(ws)-1 && w.coverage < 0.999 {
						holes++
					}
				}
				if truth := int64(hostileRate * 24); sum > truth {
					t.Errorf("%d tokens in all, the server made %d", sum, truth)
				}
				if holes == 0 {
					t.Errorf("no window says it knows less:\n%s", describe(ws))
				}
				if got := discardsOf(a); got[sample.Suspect] == 0 {
					t.Errorf("discards %v, want some %v", got, sample.Suspect)
				}
				if n := strings.Count(logs, "several replicas behind one URL?"); n != 1 {
					t.Errorf("%d suspect lines, want one for the episode:\n%s", n, logs)
				}
				// After the episode the counter is followed again.
				last := ws[len(ws)-2]
				if last.coverage < 0.999 || last.tokens < hostileWhole*9/10 || last.tokens > hostileWhole*11/10 {
					t.Errorf("after the episode: %+v, want a whole window of about %d:\n%s", last, hostileWhole, describe(ws))
				}
			})
		})
	}
}

// TestHostileGaugeCostsOnlyItself: a waiting or KV gauge that reads NaN or
// 1e30 for 6 s while the generation counter stays valid loses that gauge,
// counted with its reason; the windows keep their tokens and coverage.
func TestHostileGaugeCostsOnlyItself(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, waiting, kv string
		reason            sample.Reason
	}{
		{"waiting NaN", "NaN", "0.5", sample.NotANumber},
		{"waiting 1e30", "1e30", "0.5", sample.Huge},
		{"kv NaN", "1", "NaN", sample.NotANumber},
		{"kv 1e30", "1", "1e30", sample.Huge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				h := &hostileVLLM{start: time.Now(), page: func(since time.Duration, n int) (float64, string, string) {
					if since >= 4*time.Second && since < 10*time.Second {
						return 1000 + hostileRate*since.Seconds(), tc.waiting, tc.kv
					}
					return 1000 + hostileRate*since.Seconds(), "1", "0.5"
				}}
				ws, a, _ := runHostile(t, h, 16*time.Second)
				for i, w := range ws[1 : len(ws)-1] {
					if w.coverage < 0.999 || w.state == "down" || w.tokens < hostileWhole*9/10 || w.tokens > hostileWhole*11/10 {
						t.Errorf("window %d: %+v, want a whole window of about %d tokens:\n%s", i+1, w, hostileWhole, describe(ws))
					}
					for _, v := range []string{w.waiting, w.kv} {
						if f, err := strconv.ParseFloat(v, 64); v != "" && (err != nil || f != f || f > 1) {
							t.Errorf("window %d: a bad gauge was written: %+v", i+1, w)
						}
					}
				}
				if got := discardsOf(a); got[tc.reason] == 0 {
					t.Errorf("discards %v, want some %v", got, tc.reason)
				}
			})
		})
	}
}

// TestReplicasAgainstRealInfluxDB: two replicas behind one URL answering
// in turn for 2 s, the daemon writing to a real InfluxDB. No point holds
// more tokens than the server made in its window, the points of the
// episode say they saw less, and the replicas are counted as suspect.
func TestReplicasAgainstRealInfluxDB(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "replicas")
	const window = 500 * time.Millisecond
	rng := rand.New(rand.NewPCG(28, 2))
	// The replica that stays: half the tokens until 3 s, all of them after.
	left := func(since time.Duration) float64 {
		return 5000 + hostileRate/2*min(since, 3*time.Second).Seconds() + hostileRate*max(0, since.Seconds()-3)
	}
	// From the daemon's first scrape: how soon a loaded machine starts
	// the daemon does not move the episode towards its start.
	h := &hostileVLLM{page: func(since time.Duration, n int) (float64, string, string) {
		if since >= time.Second && since < 3*time.Second && rng.IntN(2) == 1 {
			return 20000 + hostileRate/2*since.Seconds(), "1", "0.5"
		}
		return left(since), "1", "0.5"
	}}
	srv := httptest.NewServer(h)
	defer srv.Close()
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = window, time.Second
	cfg.Servers = []config.ServerConfig{{Name: "llm", Engine: "vllm", MetricsURL: srv.URL + "/metrics",
		GPUs: []string{"auto"}, ScrapeInterval: 50 * time.Millisecond}}
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db+"/autogen"
	cfg.Sink.Spool.Dir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := collector.NewClient(5 * time.Second)
	scrapes := &timedTransport{next: client.Transport}
	client.Transport = scrapes
	start := time.Now()
	a := newAgent(cfg, Options{Log: slog.New(slog.DiscardHandler), OpenGPU: func() (GPUSampler, error) { return gpusim.Steady{Start: start}, nil }},
		hooks{client: client})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	// Stopped 2 s after the episode, by the pages served.
	waitFor(t, "5 s of pages served", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.served) > 0 && h.served[len(h.served)-1].Sub(h.start) >= 5*time.Second
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	series := influxtest.QueryEpoch(t, base, db, `SELECT tokens, coverage FROM tpsmon_server WHERE "server" = 'llm' ORDER BY time`, "ms")
	if len(series) != 1 {
		t.Fatalf("%d series", len(series))
	}
	rows := series[0].Rows()
	if len(rows) < 6 {
		t.Fatalf("%d windows written", len(rows))
	}
	h.mu.Lock()
	served, began := h.served, h.start
	first, last := served[0], served[len(served)-1]
	h.mu.Unlock()
	// A scrape's time is the middle of its request: the page was made up
	// to half the request's duration from it, which a loaded machine
	// makes tens of milliseconds.
	uncertain := scrapes.longest()
	maxGap := 5 * cfg.Servers[0].ScrapeInterval / 2
	holes := 0
	var sum float64
	for _, r := range rows {
		if r[schema.FieldCoverage] != nil && influxtest.Num(t, r[schema.FieldCoverage]) < 0.999 {
			holes++
		}
		if r[schema.FieldTokens] == nil {
			continue
		}
		tok := influxtest.Num(t, r[schema.FieldTokens])
		sum += tok
		ws := time.UnixMilli(int64(influxtest.Num(t, r["time"])))
		// What the server made in the window, and before it back to the
		// page before a silence longer than MaxGap that ends in it: the
		// daemon puts a silence's tokens in the window of the scrape
		// after it. A silence is judged by the pages' times, which are
		// the scrapes' within the uncertainty.
		from := heldFrom(served, ws, maxGap-uncertain)
		made := hostileRate * ws.Add(window).Sub(from).Seconds()
		t.Logf("window %s: tokens %v coverage %v; made %.1f from %s", ws.Format("15:04:05.000"), tok, r[schema.FieldCoverage],
			made, from.Format("15:04:05.000"))
		if bound := made*1.1 + hostileRate*uncertain.Seconds(); tok > bound {
			t.Errorf("window %s: %v tokens, the server made %.1f (bound %.1f, scrapes uncertain by %v): %v",
				ws.Format("15:04:05.000"), tok, made, bound, uncertain, rows)
		}
	}
	// In all, no more than the replica that stays counted while scraped
	// (the running total is rounded: one token).
	if truth := left(last.Sub(began)) - left(first.Sub(began)); sum > truth+1 {
		t.Errorf("%v tokens in all, the replica followed counted %v while scraped", sum, truth)
	}
	if holes < 2 {
		t.Errorf("%d windows say they saw less: %v", holes, rows)
	}
	if got := discardsOf(a); got[sample.Suspect] == 0 {
		t.Errorf("discards %v, want some %v", got, sample.Suspect)
	}
}

// heldFrom is where the tokens of the window starting at ws may come
// from: ws, or the page before ws when the first page at or after it came
// more than gap after that one (the silence's tokens are held to the
// next scrape).
func heldFrom(served []time.Time, ws time.Time, gap time.Duration) time.Time {
	for i, at := range served {
		if at.Before(ws) {
			continue
		}
		if i > 0 && at.Sub(served[i-1]) > gap {
			return served[i-1]
		}
		return ws
	}
	return ws
}

// timedTransport is an http.RoundTripper that keeps the longest request,
// from its start to its body's close.
type timedTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	max  time.Duration
}

func (tt *timedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	at := time.Now()
	resp, err := tt.next.RoundTrip(r)
	if err != nil {
		tt.note(time.Since(at))
		return nil, err
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, done: func() { tt.note(time.Since(at)) }}
	return resp, nil
}

func (tt *timedTransport) note(d time.Duration) {
	tt.mu.Lock()
	tt.max = max(tt.max, d)
	tt.mu.Unlock()
}

func (tt *timedTransport) longest() time.Duration {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return tt.max
}

type timedBody struct {
	io.ReadCloser
	done func()
}

func (b *timedBody) Close() error {
	b.done()
	return b.ReadCloser.Close()
}
