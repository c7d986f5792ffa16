package sink

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// flaky fails its first n writes with a retryable error, then records.
type flaky struct {
	mu   sync.Mutex
	n    int
	got  []string
	done chan struct{}
	want int
}

func (f *flaky) Write(_ context.Context, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n > 0 {
		f.n--
		return &WriteError{Retry: true, Err: io.ErrUnexpectedEOF}
	}
	f.got = append(f.got, string(b))
	if len(f.got) == f.want {
		close(f.done)
	}
	return nil
}

func TestSenderRetriesInOrder(t *testing.T) {
	w := &flaky{n: 2, done: make(chan struct{}), want: 3}
	s := &Sender{W: w, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.Push([]byte("a 1\n"))
	s.Push([]byte("b 2\n"))
	s.Push([]byte("c 3\n"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	select {
	case <-w.done:
	case <-time.After(20 * time.Second):
		t.Fatal("sender never delivered")
	}
	if got := strings.Join(w.got, ""); got != "a 1\nb 2\nc 3\n" {
		t.Errorf("delivered %q", got)
	}
	if sent, dropped, queued := s.Stats(); sent != 3 || dropped != 0 || queued != 0 {
		t.Errorf("stats sent %d dropped %d queued %d", sent, dropped, queued)
	}
}

func TestSenderBoundDropsOldestCounted(t *testing.T) {
	s := &Sender{W: &flaky{}, MaxBytes: 10}
	s.Push([]byte("a 1\nb 2\n")) // 8 bytes, 2 lines
	s.Push([]byte("c 3\n"))      // 12 bytes: the first batch goes
	if _, dropped, queued := s.Stats(); dropped != 2 || queued != 4 {
		t.Errorf("dropped %d queued %d, want 2 and 4", dropped, queued)
	}
}
