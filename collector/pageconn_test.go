package collector

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawServer answers on loopback with bytes of its own: answer gets each
// request's index over all connections and writes what it likes; close
// ends the connection after it.
type rawServer struct {
	ln    net.Listener
	conns atomic.Int64
	reqs  atomic.Int64
	wg    sync.WaitGroup
}

func newRawServer(t *testing.T, answer func(i int, w *bufio.Writer) (close bool)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.wg.Go(func() {
				defer c.Close()
				br, bw := bufio.NewReader(c), bufio.NewWriter(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					closeAfter := answer(int(s.reqs.Add(1)-1), bw)
					if bw.Flush() != nil || closeAfter {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() + "/metrics" }

const testPage = "vllm:generation_tokens_total 1500\n"

// okAnswer is a whole answer with its length.
func okAnswer(w *bufio.Writer) {
	fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(testPage), testPage)
}

// TestPageConn: a scraper's own connection is kept across pages while the
// server keeps it, asked again on a new one when the server closed it
// while idle, never kept after an answer it cannot trust, and every
// failure is an error that names it, bounded in time and bytes.
func TestPageConn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  func(i int, w *bufio.Writer) (close bool)
		conns   int64  // connections for three pages
		err     string // the pages' error ("" none), the first failing pages' when set
		is      error  // and what it is
		failing int
	}{
		{"kept", func(_ int, w *bufio.Writer) bool { okAnswer(w); return false }, 1, "", nil, 0},
		{"chunked", func(_ int, w *bufio.Writer) bool {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(testPage), testPage)
			return false
		}, 1, "", nil, 0},
		{"Connection: close", func(_ int, w *bufio.Writer) bool {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(testPage), testPage)
			return true
		}, 3, "", nil, 0},
		// The server keeps nothing but says nothing: the next page's
		// request finds the connection closed and is sent again.
		{"closed while idle", func(_ int, w *bufio.Writer) bool { okAnswer(w); return true }, 3, "", nil, 0},
		{"HTTP/1.0 without length", func(_ int, w *bufio.Writer) bool {
			fmt.Fprintf(w, "HTTP/1.0 200 OK\r\n\r\n%s", testPage)
			return true
		}, 3, "", nil, 0},
		{"early hints first", func(_ int, w *bufio.Writer) bool {
			w.WriteString("HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
			okAnswer(w)
			return false
		}, 1, "", nil, 0},
		// Bytes after the answer belong to no request: the connection
		// goes.
		{"two answers to one request", func(_ int, w *bufio.Writer) bool { okAnswer(w); okAnswer(w); return false }, 3, "", nil, 0},
		{"body cut short", func(_ int, w *bufio.Writer) bool {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n%s", testPage)
			return true
		}, 3, "unexpected EOF", nil, 0},
		{"not found", func(_ int, w *bufio.Writer) bool {
			w.WriteString("HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found")
			return false
		}, 3, "HTTP 404 Not Found", nil, 0},
		{"redirect", func(_ int, w *bufio.Writer) bool {
			w.WriteString("HTTP/1.1 302 Found\r\nLocation: http://elsewhere.invalid/metrics\r\nContent-Length: 0\r\n\r\n")
			return false
		}, 3, "Location http://elsewhere.invalid/metrics", ErrRedirect, 0},
		{"no answer", func(_ int, w *bufio.Writer) bool {
			time.Sleep(400 * time.Millisecond)
			return true
		}, 3, "within the client Timeout of 200ms", context.DeadlineExceeded, 0},
		{"the body too late", func(_ int, w *bufio.Writer) bool {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(testPage), testPage[:5])
			w.Flush()
			time.Sleep(400 * time.Millisecond)
			w.WriteString(testPage[5:])
			return false
		}, 3, "within the client Timeout of 200ms", context.DeadlineExceeded, 0},
		// A page late once: the next is asked for on a new connection,
		// with the whole Timeout of its own.
		{"late once", func(i int, w *bufio.Writer) bool {
			if i == 0 {
				time.Sleep(400 * time.Millisecond)
			}
			time.Sleep(150 * time.Millisecond)
			okAnswer(w)
			return false
		}, 2, "within the client Timeout of 200ms", context.DeadlineExceeded, 1},
		{"garbage", func(_ int, w *bufio.Writer) bool { w.WriteString("SSH-2.0-OpenSSH_9.2\r\n"); return true }, 3, "malformed HTTP", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, tc.answer)
			client := NewClient(200 * time.Millisecond)
			req, _ := http.NewRequest(http.MethodGet, srv.url(), nil)
			p, ok := leanPage(client, req)
			if !ok {
				t.Fatal("a plain-HTTP page with NewClient's transport is not read on its own connection")
			}
			defer p.close()
			var body bytes.Buffer
			for i := range 3 {
				got, err := p.get(context.Background(), req, client.Timeout, &body)
				tc := tc
				if tc.failing > 0 && i >= tc.failing {
					tc.err, tc.is = "", nil
				}
				switch {
				case tc.err == "" && err != nil:
					t.Fatalf("page %d: %v", i, err)
				case tc.err == "" && string(got) != testPage:
					t.Fatalf("page %d: %q, want %q", i, got, testPage)
				case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
					t.Fatalf("page %d: err %v, want one saying %q", i, err, tc.err)
				case tc.is != nil && !errors.Is(err, tc.is):
					t.Fatalf("page %d: err %v is not %v", i, err, tc.is)
				}
			}
			if got := srv.conns.Load(); got != tc.conns {
				t.Errorf("%d connections for 3 pages, want %d", got, tc.conns)
			}
		})
	}
}

// TestPageConnBounds: headers without end stop at maxHeader, not at the
// Timeout; a scraper's cancelled context ends a request the server never
// answers, and says so, not a timeout.
func TestPageConnBounds(t *testing.T) {
	flood := newRawServer(t, func(_ int, w *bufio.Writer) bool {
		w.WriteString("HTTP/1.1 200 OK\r\n")
		line := "X-Flood: " + strings.Repeat("a", 1000) + "\r\n"
		for { // until tpsmon hangs up
			if _, err := w.WriteString(line); err != nil {
				return true
			}
		}
	})
	client := NewClient(3 * time.Second)
	req, _ := http.NewRequest(http.MethodGet, flood.url(), nil)
	p, _ := leanPage(client, req)
	var body bytes.Buffer
	if _, err := p.get(context.Background(), req, client.Timeout, &body); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("headers without end: err %v, want one before the Timeout", err)
	}
	p.close()

	hold := make(chan struct{})
	silent := newRawServer(t, func(_ int, w *bufio.Writer) bool {
		<-hold
		return true
	})
	t.Cleanup(func() { close(hold) }) // before the server's: it waits for this answer
	req, _ = http.NewRequest(http.MethodGet, silent.url(), nil)
	client = NewClient(time.Minute)
	p, _ = leanPage(client, req)
	defer p.close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() {
		_, err := p.get(ctx, req, client.Timeout, &body)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled while waiting: err %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request went on after its context ended")
	}
}

// TestLeanPage: only a plain-HTTP page, with NewClient's transport and
// no proxy for it, is read on a connection of its own.
func TestLeanPage(t *testing.T) {
	viaProxy := NewClient(time.Second)
	viaProxy.Transport.(*scrapeTransport).Proxy = func(*http.Request) (*url.URL, error) {
		return url.Parse("http://proxy.invalid:3128")
	}
	for _, tc := range []struct {
		name   string
		client *http.Client
		url    string
		want   bool
	}{
		{"plain HTTP", NewClient(time.Second), "http://127.0.0.1:8000/metrics", true},
		{"no port", NewClient(time.Second), "http://localhost/metrics", true},
		{"TLS", NewClient(time.Second), "https://127.0.0.1:8000/metrics", false},
		{"a user in the URL", NewClient(time.Second), "http://u:p@127.0.0.1:8000/metrics", false},
		{"through a proxy", viaProxy, "http://10.0.0.1:8000/metrics", false},
		{"another transport", &http.Client{Transport: &http.Transport{}}, "http://127.0.0.1:8000/metrics", false},
		{"the default transport", &http.Client{}, "http://127.0.0.1:8000/metrics", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			p, ok := leanPage(tc.client, req)
			if ok != tc.want {
				t.Fatalf("leanPage = %v, want %v", ok, tc.want)
			}
			if ok && (!strings.HasPrefix(string(p.ask), "GET /metrics HTTP/1.1\r\n") || !strings.Contains(p.addr, ":")) {
				t.Errorf("request %q to %q", p.ask, p.addr)
			}
		})
	}
}
