package top

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/internal/redact"
)

// ErrNotListening means nothing accepts connections at the address.
var ErrNotListening = errors.New("nothing listening")

// Client reads the daemon's windows.
type Client struct {
	base string // http://host:port
	HTTP *http.Client
}

// NewClient returns a client of the daemon at addr: host:port or an
// http:// URL.
func NewClient(addr string, hc *http.Client) (*Client, error) {
	base := addr
	if !strings.Contains(addr, "://") {
		base = "http://" + addr
	}
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--addr %q: want host:port or an http:// URL", redact.URL(addr))
	}
	if hc == nil {
		hc = &http.Client{CheckRedirect: collector.RefuseRedirect}
	}
	return &Client{base: strings.TrimRight(u.Scheme+"://"+u.Host, "/"), HTTP: hc}, nil
}

// Addr is where the client asks.
func (c *Client) Addr() string { return c.base }

// Windows fetches the last history closed windows of every series and the
// open window.
func (c *Client) Windows(ctx context.Context, history int) (api.Windows, error) {
	var w api.Windows
	u := c.base + api.WindowsPath + "?history=" + strconv.Itoa(history)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return w, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return w, fmt.Errorf("%s: %w", c.base, ErrNotListening)
		}
		return w, fmt.Errorf("%s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusNotFound {
			return w, fmt.Errorf("%s answers but serves no %s: a tpsmon older than top, or not tpsmon? (%s)", c.base, api.WindowsPath, resp.Status)
		}
		return w, fmt.Errorf("%s%s: %s: %s", c.base, api.WindowsPath, resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&w); err != nil {
		return w, fmt.Errorf("%s%s: reading the windows: %w", c.base, api.WindowsPath, err)
	}
	return w, nil
}

// Explain turns a failed first fetch into the one line a user needs.
func Explain(err error, addr string) string {
	if errors.Is(err, ErrNotListening) {
		return fmt.Sprintf("nothing listening at %s: is the tpsmon service running (systemctl status tpsmon)? "+
			"Does http.listen in its configuration name this address (--addr)?", addr)
	}
	return err.Error()
}
