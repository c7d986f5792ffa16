package httpserve

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// capListener accepts at most max connections at a time. At the cap, a
// new connection closes the one idle the longest (a keep-alive one
// first, then one that sent no request yet), so that a client holding
// idle connections cannot lock out a probe; when all are busy it is
// closed at once. Nothing waits in the kernel's accept queue, as it
// would behind x/net/netutil.LimitListener's semaphore. Transient accept
// errors (out of file descriptors) are retried with backoff, as
// http.Server does, but logged at most once per every, with their count.
type capListener struct {
	net.Listener
	max int
	log *slog.Logger

	// Backoff of a failed accept, and the interval of log lines.
	minBackoff, maxBackoff, every time.Duration

	closing   chan struct{}
	closeOnce sync.Once

	mu    sync.Mutex
	conns map[*conn]struct{}

	// Only Accept's goroutine touches these: counts since the last line.
	failed, closedIdle, refused int
	failLog, fullLog            rateLog

	// The same since the start, for /metrics.
	total Shed
}

// Shed counts what the endpoint turned away since it started.
type Shed struct {
	FailedAccepts atomic.Uint64 // accepts that failed (out of file descriptors) and were retried
	ClosedIdle    atomic.Uint64 // idle connections closed at the cap to let a new one in
	Refused       atomic.Uint64 // new connections closed at the cap, every one busy
}

func newCapListener(ln net.Listener, n int, log *slog.Logger) *capListener {
	return &capListener{Listener: ln, max: max(n, 1), log: log, minBackoff: 5 * time.Millisecond, maxBackoff: time.Second,
		every: time.Minute, closing: make(chan struct{}), conns: make(map[*conn]struct{})}
}

// conn is an accepted connection and what the server last said of it.
type conn struct {
	net.Conn
	l     *capListener
	state http.ConnState // guarded by l.mu
	since time.Time      // when it entered state
}

func (c *conn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *capListener) Accept() (net.Conn, error) {
	var backoff time.Duration
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if !transient(err) {
				return nil, err
			}
			l.failed++
			l.total.FailedAccepts.Add(1)
			if l.failLog.due(time.Now(), l.every) {
				l.log.Warn("http: accepting connections fails; retrying", "addr", l.Addr().String(),
					"failed_accepts", l.failed, "err", err)
				l.failed = 0
			}
			backoff = min(max(2*backoff, l.minBackoff), l.maxBackoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.closing:
				t.Stop()
				return nil, net.ErrClosed
			}
			continue
		}
		backoff = 0
		if c := l.admit(nc); c != nil {
			return c, nil
		}
	}
}

// admit tracks nc, making room at the cap; nil: nc was closed instead.
func (l *capListener) admit(nc net.Conn) *conn {
	now := time.Now()
	l.mu.Lock()
	var victim *conn
	if len(l.conns) >= l.max {
		if victim = l.longestIdle(); victim != nil {
			delete(l.conns, victim)
		}
	}
	var c *conn
	if len(l.conns) < l.max {
		c = &conn{Conn: nc, l: l, state: http.StateNew, since: now}
		l.conns[c] = struct{}{}
	}
	l.mu.Unlock()
	switch {
	case victim != nil:
		victim.Conn.Close() // its server goroutine ends on the error
		l.closedIdle++
		l.total.ClosedIdle.Add(1)
	case c == nil:
		nc.Close()
		l.refused++
		l.total.Refused.Add(1)
	default:
		return c
	}
	if l.fullLog.due(now, l.every) {
		l.log.Warn("http: connection cap reached; closing the longest idle connection, or the new one when none is idle",
			"addr", l.Addr().String(), "max_connections", l.max, "closed_idle", l.closedIdle, "refused", l.refused)
		l.closedIdle, l.refused = 0, 0
	}
	return c
}

// longestIdle is the keep-alive connection idle the longest, else the one
// that has waited the longest for its first request; nil when every
// connection is busy. l.mu is held.
func (l *capListener) longestIdle() *conn {
	var idle, fresh *conn
	for c := range l.conns {
		switch {
		case c.state == http.StateIdle && (idle == nil || c.since.Before(idle.since)):
			idle = c
		case c.state == http.StateNew && (fresh == nil || c.since.Before(fresh.since)):
			fresh = c
		}
	}
	if idle != nil {
		return idle
	}
	return fresh
}

// track is the server's ConnState hook.
func (l *capListener) track(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st == http.StateClosed {
		delete(l.conns, c)
	} else if _, ok := l.conns[c]; ok {
		c.state, c.since = st, time.Now()
	}
}

func (l *capListener) Close() error {
	l.closeOnce.Do(func() { close(l.closing) })
	return l.Listener.Close()
}

// transient tells the accept errors that pass: out of file descriptors or
// memory, or a connection reset before it was accepted.
func transient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.EPROTO, syscall.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// rateLog lets a line through at most once per interval.
type rateLog struct{ last time.Time }

func (r *rateLog) due(now time.Time, every time.Duration) bool {
	if !r.last.IsZero() && now.Sub(r.last) < every {
		return false
	}
	r.last = now
	return true
}
