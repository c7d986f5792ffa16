// Package httpserve serves tpsmon's own HTTP endpoints within bounds: every
// phase of a connection has a timeout, and the open connections are
// capped, so that local clients cannot take the memory and file
// descriptors the daemon needs to scrape its servers (issue 28).
package httpserve

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"
)

// Limits bound one endpoint.
type Limits struct {
	// MaxConns caps the open connections. At the cap a new connection
	// closes the one idle the longest (keep-alive, or no request yet),
	// or is closed itself when every one is busy: none waits in the
	// kernel's queue for a slot.
	MaxConns int
	// ReadHeader bounds reading a request's headers, Read the whole
	// request, Write the response (from the end of the headers), Idle a
	// keep-alive connection's wait for its next request.
	ReadHeader, Read, Write, Idle time.Duration
}

// Defaults are the bounds of tpsmon's endpoints. Every request is a small
// GET answered from memory in milliseconds, so the timeouts leave a slow
// client seconds, not minutes; Write is 30 s. A Prometheus that scrapes
// every 15 s keeps its connection; one that scrapes once a minute
// reconnects, which costs nothing.
func Defaults() Limits {
	return Limits{MaxConns: 64, ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 30 * time.Second}
}

// ProfileWrite is Write with Go's profiles served: /debug/pprof/profile
// and /trace refuse a duration not under the write timeout, and default
// to 30 s.
const ProfileWrite = 2 * time.Minute

// FileShare is the part of the open-file limit the connections may hold:
// the rest stays for scrapes, logs, the spool and InfluxDB.
const FileShare = 4

// CapToFiles lowers n to the open-file limit's FileShare, at least 1,
// and returns the limit it read (0 when unreadable: n is kept). Go has
// raised the soft limit to the hard one at start (since Go 1.19), so the
// soft limit read here is what the process can open.
func CapToFiles(n int) (capped int, nofile uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || n < 1 {
		return n, 0
	}
	if share := max(lim.Cur/FileShare, 1); share < uint64(n) {
		return int(share), lim.Cur
	}
	return n, lim.Cur
}

// Server is an endpoint being served.
type Server struct {
	srv  *http.Server
	ln   *capListener
	done chan struct{}
}

// Serve serves h on ln within lim until Close; accept errors and refused
// connections are logged to log, at most once a minute each.
func Serve(ln net.Listener, h http.Handler, lim Limits, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cl := newCapListener(ln, lim.MaxConns, log)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    64 << 10, // requests are GETs with a few headers
		ConnState:         cl.track,
		// What net/http says of a single connection (a handler's panic);
		// accept errors never get here: capListener retries them.
		ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelWarn),
	}
	s := &Server{srv: srv, ln: cl, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := srv.Serve(cl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http endpoint stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return s
}

// Shed is what the endpoint turned away since Serve, counted as it goes.
func (s *Server) Shed() *Shed { return &s.ln.total }

// Close closes the listener and every connection, and returns once the
// serving goroutine has ended.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	if err != nil {
		return fmt.Errorf("http endpoint: %w", err)
	}
	return nil
}
