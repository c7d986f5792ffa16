package collector

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// pageConn is a scraper's own keep-alive connection to a plain-HTTP
// metrics page: the request is written and the answer read in the
// scraper's goroutine, with net/http's own request writer and response
// reader. net/http's Transport hands every request to two goroutines of
// the connection's and through its pool of idle connections; at a page a
// second that cost more than all the parsing (bench S1: bench/floor
// reading its pages this way used 15 % less CPU than with a Client).
// Pages over TLS or through a proxy keep the Transport (leanPage).
//
// A pageConn is used by one goroutine; close ends it.
type pageConn struct {
	addr string // host:port
	// ask is the request as it goes on the wire, written once: the page's
	// request never changes.
	ask  []byte
	conn net.Conn
	// lim is what the answer being read may still take from conn: the
	// headers maxHeader, the body maxPage more.
	lim io.LimitedReader
	br  *bufio.Reader
	// ctx is the context whose end interrupts conn (stop undoes that).
	ctx  context.Context
	stop func() bool
}

// maxHeader bounds an answer's status line and headers.
const maxHeader = 1 << 20

// errClosedIdle marks a kept connection the server closed while it was
// idle: nothing of the answer came, and the page is asked for again on a
// new one, as the Transport does for a GET.
var errClosedIdle = errors.New("the kept connection was closed by the server")

// leanPage says whether a scraper reads req on its own connection: a
// plain-HTTP page, with NewClient's transport, no proxy for it.
func leanPage(client *http.Client, req *http.Request) (*pageConn, bool) {
	t, ok := client.Transport.(*scrapeTransport)
	if !ok || req.URL.Scheme != "http" || req.URL.User != nil {
		return nil, false
	}
	if t.Proxy != nil {
		if u, err := t.Proxy(req); err != nil || u != nil {
			return nil, false
		}
	}
	var ask bytes.Buffer
	if err := req.Write(&ask); err != nil {
		return nil, false
	}
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	return &pageConn{addr: net.JoinHostPort(req.URL.Hostname(), port), ask: ask.Bytes()}, true
}

// get asks for the page of req (leanPage's, which ask is) within timeout (none when 0) and reads its body
// into body, as much as maxPage; ctx's end interrupts it. A connection is
// kept only after a whole 200 answer the server did not close.
func (p *pageConn) get(ctx context.Context, req *http.Request, timeout time.Duration, body *bytes.Buffer) ([]byte, error) {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		kept := p.conn != nil
		if !kept {
			if err := p.dial(ctx, deadline); err != nil {
				return nil, p.cause(ctx, timeout, err)
			}
		}
		b, err := p.exchange(ctx, req, deadline, body)
		if err == nil {
			return b, nil
		}
		p.close()
		if !kept || !errors.Is(err, errClosedIdle) || ctx.Err() != nil {
			return nil, p.cause(ctx, timeout, err)
		}
	}
}

func (p *pageConn) dial(ctx context.Context, deadline time.Time) error {
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return err
	}
	p.conn = c
	p.lim = io.LimitedReader{R: c}
	if p.br == nil {
		p.br = bufio.NewReader(&p.lim)
	} else {
		p.br.Reset(&p.lim)
	}
	p.ctx = nil
	return nil
}

// exchange writes req and reads its answer on the connection.
func (p *pageConn) exchange(ctx context.Context, req *http.Request, deadline time.Time, body *bytes.Buffer) ([]byte, error) {
	if ctx != p.ctx {
		if p.stop != nil {
			p.stop()
		}
		c := p.conn
		p.ctx, p.stop = ctx, context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	}
	if err := p.conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil { // ended before the deadline was set
		return nil, err
	}
	p.lim.N = maxHeader
	if _, err := p.conn.Write(p.ask); err != nil {
		return nil, p.idle(err)
	}
	resp, err := http.ReadResponse(p.br, req)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
		resp, err = http.ReadResponse(p.br, req) // 103 Early Hints and the like come before the answer
	}
	if err != nil {
		return nil, p.idle(err)
	}
	p.lim.N += maxPage + 1
	if err := redirected(resp); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	body.Reset()
	if _, err := body.ReadFrom(io.LimitReader(resp.Body, maxPage)); err != nil {
		return nil, err
	}
	// Kept only when the answer ended where it said and nothing came
	// after it; a page cut at maxPage is read as it is, on a connection
	// not kept.
	var one [1]byte
	if n, err := resp.Body.Read(one[:]); n > 0 || err != io.EOF || resp.Close || p.br.Buffered() > 0 {
		p.close()
	}
	return body.Bytes(), nil
}

// idle marks err as errClosedIdle when nothing of the answer came.
func (p *pageConn) idle(err error) error {
	if p.lim.N == maxHeader && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: %w", errClosedIdle, err)
	}
	return err
}

// cause says why a page was not read: the context's end, the client's
// Timeout (clientTimeout, as the Transport's path says it), or err.
func (p *pageConn) cause(ctx context.Context, timeout time.Duration, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded):
		return clientTimeout(timeout)
	}
	return err
}

// close ends the connection, if any; the next get dials anew.
func (p *pageConn) close() {
	if p == nil || p.conn == nil {
		return
	}
	if p.stop != nil {
		p.stop()
	}
	p.conn.Close()
	p.conn, p.ctx, p.stop = nil, nil, nil
}
