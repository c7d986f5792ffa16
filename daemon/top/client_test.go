package top

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/daemon/live"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/loopback"
	"github.com/tpsmon/tpsmon/window"
)

func TestClientAgainstLiveView(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	v := live.New("node", 5*time.Second, nil)
	for i := range 4 {
		start := t0.Add(time.Duration(i) * 5 * time.Second)
		v.WriteWindows([]analysis.Closed{{Start: start, Servers: []analysis.ServerWindow{{State: schema.StateSaturated,
			ServerWindow: window.ServerWindow{Start: start, Server: "demo-vllm", GPUs: []string{"0"},
				SystemTPS: window.Some(100.0 * float64(i+1)), Tokens: window.Some(int64(500 * (i + 1)))}}}}})
	}
	srv := httptest.NewServer(v)
	defer srv.Close()
	for _, addr := range []string{srv.Listener.Addr().String(), srv.URL, srv.URL + "/"} {
		c, err := NewClient(addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.Windows(context.Background(), api.MaxHistory)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if len(w.Closed) != 4 || w.Host != "node" {
			t.Fatalf("%s: %+v", addr, w)
		}
		// JSON numbers come back as float64, int fields included.
		if tok, ok := w.Closed[3].Float(schema.FieldTokens); !ok || tok != 2000 {
			t.Errorf("tokens of the newest window: %v %v", tok, ok)
		}
	}
	c, _ := NewClient(srv.URL, nil)
	var out bytes.Buffer
	if err := Once(context.Background(), Config{Client: c}, &out, 100); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"demo-vllm", "saturated", "400.0", "▃▅▆█"} {
		if !strings.Contains(s, want) {
			t.Errorf("--once output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "q quit") {
		t.Errorf("--once has no keys to tell:\n%s", s)
	}
	if strings.Contains(s, "\x1b[") {
		t.Errorf("--once must be plain text:\n%q", s)
	}
}

func TestClientErrors(t *testing.T) {
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	// A daemon address that redirects (here to a server with no API).
	redirect := httptest.NewServer(http.RedirectHandler(other.URL+"/api/v1/windows", http.StatusFound))
	defer redirect.Close()
	gone := loopback.RefusedAddr(t)
	for _, tc := range []struct {
		addr     string
		is       error
		contains []string
	}{
		{gone, ErrNotListening, []string{"nothing listening at http://" + gone, "service running", "http.listen"}},
		{other.URL, nil, []string{"serves no /api/v1/windows", "404"}},
		{redirect.URL, collector.ErrRedirect, []string{"redirect not followed", "Location " + other.URL + "/api/v1/windows"}},
	} {
		c, err := NewClient(tc.addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err = Once(context.Background(), Config{Client: c}, &out, 80)
		if err == nil {
			t.Fatalf("%s: no error", tc.addr)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v is not %v", tc.addr, err, tc.is)
		}
		for _, want := range tc.contains {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q lacks %q", tc.addr, err, want)
			}
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("want one line, got %q", err)
		}
		if out.Len() != 0 {
			t.Errorf("nothing to print when the daemon does not answer, got %q", out.String())
		}
	}
	for _, bad := range []string{"ftp://x:1", "http://", "::", "ftp://u:hunter2@x:1/?token=hunter2"} {
		if _, err := NewClient(bad, nil); err == nil || !strings.Contains(err.Error(), "--addr") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("NewClient(%q): %v, want an --addr error without the credentials", bad, err)
		}
	}
}
