// Package sdnotify is systemd's side of sd_notify, for tests: a socket
// that records what the daemon tells it.
package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Socket listens like systemd for sd_notify datagrams.
type Socket struct {
	// Path is where it listens: NOTIFY_SOCKET.
	Path string
	mu   sync.Mutex
	msgs []string
}

// Listen opens a socket for the test.
func Listen(t testing.TB) *Socket {
	t.Helper()
	n := &Socket{Path: filepath.Join(t.TempDir(), "notify.sock")}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: n.Path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.msgs = append(n.msgs, string(buf[:k]))
			n.mu.Unlock()
		}
	}()
	return n
}

// All returns the messages so far.
func (n *Socket) All() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.msgs...)
}

// WaitFor waits until a message after index from starts with prefix and
// returns its index.
func (n *Socket) WaitFor(t testing.TB, from int, prefix string) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		msgs := n.All()
		for i := from; i < len(msgs); i++ {
			if strings.HasPrefix(msgs[i], prefix) {
				return i
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q after message %d; got %q", prefix, from, n.All())
	return -1
}

// Count counts the messages in [from, to) that start with prefix.
func (n *Socket) Count(from, to int, prefix string) int {
	c := 0
	for _, m := range n.All()[from:to] {
		if strings.HasPrefix(m, prefix) {
			c++
		}
	}
	return c
}
