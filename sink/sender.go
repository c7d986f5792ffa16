package sink

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Writer is where a Sender delivers batches of line protocol.
type Writer interface {
	Write(ctx context.Context, lines []byte) error
}

// Sender queues encoded lines in memory and delivers them in order,
// retrying with exponential backoff what the server may accept later.
// The queue is bounded by MaxBytes: when full, the oldest batch goes, and
// the lines it held are counted in Dropped.
type Sender struct {
	W        Writer
	MaxBytes int
	Log      *slog.Logger

	mu      sync.Mutex
	queue   [][]byte
	bytes   int
	dropped uint64
	sent    uint64
	wake    chan struct{}
}

// Push queues lines (one or more whole lines, newline-terminated).
func (s *Sender) Push(lines []byte) {
	if len(lines) == 0 {
		return
	}
	s.mu.Lock()
	s.queue = append(s.queue, lines)
	s.bytes += len(lines)
	for s.MaxBytes > 0 && s.bytes > s.MaxBytes && len(s.queue) > 1 {
		old := s.queue[0]
		s.queue = s.queue[1:]
		s.bytes -= len(old)
		s.dropped += uint64(bytes.Count(old, []byte("\n")))
	}
	w := s.wakeChan()
	s.mu.Unlock()
	select {
	case w <- struct{}{}:
	default:
	}
}

func (s *Sender) wakeChan() chan struct{} {
	if s.wake == nil {
		s.wake = make(chan struct{}, 1)
	}
	return s.wake
}

// Stats returns lines sent and dropped, and the bytes still queued.
func (s *Sender) Stats() (sent, dropped uint64, queued int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, s.dropped, s.bytes
}

func (s *Sender) head() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil
	}
	return s.queue[0]
}

func (s *Sender) pop(b []byte, delivered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 || &s.queue[0][0] != &b[0] {
		return // dropped while being sent
	}
	s.queue = s.queue[1:]
	s.bytes -= len(b)
	n := uint64(bytes.Count(b, []byte("\n")))
	if delivered {
		s.sent += n
	} else {
		s.dropped += n
	}
}

const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 60 * time.Second
)

// Run delivers queued lines until ctx ends.
func (s *Sender) Run(ctx context.Context) {
	s.mu.Lock()
	wake := s.wakeChan()
	s.mu.Unlock()
	backoff := minBackoff
	failing := false
	for {
		b := s.head()
		if b == nil {
			select {
			case <-ctx.Done():
				return
			case <-wake:
				continue
			}
		}
		err := s.W.Write(ctx, b)
		if err == nil {
			s.pop(b, true)
			if failing {
				s.Log.Info("influx writes succeed again")
				failing = false
			}
			backoff = minBackoff
			continue
		}
		if ctx.Err() != nil {
			return
		}
		var we *WriteError
		if errors.As(err, &we) && !we.Retry {
			s.Log.Error("influx rejected points; dropping them", "err", err)
			s.pop(b, false)
			continue
		}
		if !failing {
			s.Log.Warn("influx write failed; keeping points and retrying", "err", err)
			failing = true
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if we != nil && we.After > wait {
			wait = we.After
		}
		backoff = min(2*backoff, maxBackoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Drain tries once more to deliver everything queued, until ctx ends;
// for shutdown. It returns the error of the first failed write.
func (s *Sender) Drain(ctx context.Context) error {
	for {
		b := s.head()
		if b == nil {
			return nil
		}
		if err := s.W.Write(ctx, b); err != nil {
			return err
		}
		s.pop(b, true)
	}
}
