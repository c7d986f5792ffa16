package httpserve

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// serve serves a handler on loopback within lim: /block answers once
// release is closed, everything else at once.
func serve(t *testing.T, lim Limits, log *slog.Logger) (*Server, string, chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) { <-release })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	s := Serve(ln, mux, lim, log)
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String(), release
}

// client is one raw connection, read through one bufio.Reader.
type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return &client{c, bufio.NewReader(c)}
}

// get sends a request for path and, unless it blocks, reads the answer.
func (c *client) get(t *testing.T, path string) {
	t.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path)
	if path == "/block" {
		return
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// closedByServer tells whether the server closed c (EOF or reset).
func (c *client) closedByServer() bool {
	_, err := c.r.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// waitState waits until the server has n connections in state.
func waitState(t *testing.T, s *Server, state http.ConnState, n int) {
	t.Helper()
	count := func() int {
		s.ln.mu.Lock()
		defer s.ln.mu.Unlock()
		k := 0
		for c := range s.ln.conns {
			if c.state == state {
				k++
			}
		}
		return k
	}
	for deadline := time.Now().Add(5 * time.Second); count() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections %v, want %d", count(), state, n)
		}
	}
}

// TestCapClosesLongestIdle: at the cap, a new connection closes the one
// idle the longest; when every connection is busy it is closed itself.
// The cap reached is logged once.
func TestCapClosesLongestIdle(t *testing.T) {
	var logs bytes.Buffer
	lim := Defaults()
	lim.MaxConns = 3
	s, addr, release := serve(t, lim, slog.New(slog.NewTextHandler(&logs, nil)))
	var idle []*client
	for i := range 3 {
		c := dial(t, addr)
		c.get(t, "/")
		idle = append(idle, c)
		waitState(t, s, http.StateIdle, i+1) // idle in this order
	}
	probe := dial(t, addr)
	probe.get(t, "/healthz") // answered: the longest idle made room
	if !idle[0].closedByServer() {
		t.Error("the longest idle connection was not closed for the new one")
	}
	for _, c := range idle[1:] {
		c.get(t, "/") // still served
	}

	// Three busy connections: a fourth is closed unanswered.
	busy := []*client{idle[1], idle[2], probe}
	for _, c := range busy {
		c.get(t, "/block")
	}
	waitState(t, s, http.StateActive, 3)
	extra := dial(t, addr)
	fmt.Fprintf(extra, "GET / HTTP/1.1\r\nHost: t\r\n\r\n")
	if !extra.closedByServer() {
		t.Error("a connection over the cap with every one busy was not closed")
	}
	close(release)
	for _, c := range busy {
		if resp, err := http.ReadResponse(c.r, nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("a busy connection's answer: %v %v", resp, err)
		}
	}
	if n := strings.Count(logs.String(), "connection cap reached"); n != 1 {
		t.Errorf("%d lines for the cap reached, want 1:\n%s", n, logs.String())
	}
}

// TestTimeoutsCloseConnections: a connection that sends nothing, one that
// sends half a request and an idle keep-alive one are closed after their
// timeout.
func TestTimeoutsCloseConnections(t *testing.T) {
	lim := Limits{MaxConns: 10, ReadHeader: 100 * time.Millisecond, Read: 200 * time.Millisecond,
		Write: time.Second, Idle: 100 * time.Millisecond}
	_, addr, _ := serve(t, lim, nil)
	// The server's clocks start at accept, after this: taken after the
	// dials, a close came 99.9 ms "early" under -race.
	start := time.Now()
	silent, half, idle := dial(t, addr), dial(t, addr), dial(t, addr)
	fmt.Fprintf(half, "GET / HTTP/1.1\r\nHost: t\r\n")
	idle.get(t, "/")
	for name, c := range map[string]*client{"silent": silent, "half a request": half, "idle": idle} {
		if !c.closedByServer() {
			t.Errorf("%s: not closed within 5 s", name)
		}
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("closed after %v, before the timeouts", d)
	}
}

// fakeListener fails its first fails accepts with EMFILE, then hands out
// one end of a pipe, then fails for good.
type fakeListener struct {
	fails int
	n     int
	mu    sync.Mutex
}

func (f *fakeListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	switch {
	case f.n <= f.fails:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	case f.n == f.fails+1:
		c, _ := net.Pipe()
		return c, nil
	}
	return nil, errors.New("listener broken")
}

func (f *fakeListener) Close() error   { return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// TestAcceptErrorsLoggedOnceAMinute: 100 accepts failing for lack of file
// descriptors are retried with backoff (up to a second) and logged twice
// in the 90-odd seconds they take, not 100 times; a lasting error ends
// Accept. It runs in a bubble: the backoff takes no real time.
func TestAcceptErrorsLoggedOnceAMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		l := newCapListener(&fakeListener{fails: 100}, 4, slog.New(slog.NewTextHandler(&logs, nil)))
		start := time.Now()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		took := time.Since(start)
		if _, err := l.Accept(); err == nil || !strings.Contains(err.Error(), "listener broken") {
			t.Errorf("a lasting error: %v", err)
		}
		if n := strings.Count(logs.String(), "accepting connections fails"); n != 2 {
			t.Errorf("%d lines for 100 failed accepts in %v, want 2:\n%s", n, took, logs.String())
		}
		if !strings.Contains(logs.String(), "too many open files") || !strings.Contains(logs.String(), "failed_accepts=1 ") {
			t.Errorf("the first line does not say why:\n%s", logs.String())
		}
		if took < 90*time.Second || took > 100*time.Second {
			t.Errorf("100 failed accepts took %v: backoff not 5 ms doubling up to 1 s", took)
		}
	})
}

// TestCloseEndsBackoff: closing the listener ends an Accept waiting out
// its backoff.
func TestCloseEndsBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newCapListener(&fakeListener{fails: 1 << 30}, 4, nil)
		l.log = slog.New(slog.DiscardHandler)
		done := make(chan error)
		go func() { _, err := l.Accept(); done <- err }()
		time.Sleep(10 * time.Second)
		l.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	})
}

// TestCapToFiles: the cap is at most a quarter of the open-file limit.
func TestCapToFiles(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig)
	for _, tc := range []struct {
		nofile uint64
		n      int
		want   int
	}{{1024, 64, 64}, {128, 64, 32}, {100, 1000, 25}, {3, 64, 1}} {
		lim := syscall.Rlimit{Cur: tc.nofile, Max: orig.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		if got, nofile := CapToFiles(tc.n); got != tc.want || nofile != tc.nofile {
			t.Errorf("nofile %d, cap %d: %d (read %d), want %d", tc.nofile, tc.n, got, nofile, tc.want)
		}
	}
}
