package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/sink/spool"
)

// Writer is where a Sender delivers batches of line protocol.
type Writer interface {
	Write(ctx context.Context, lines []byte) error
}

// Sender drains a spool into a Writer, oldest points first, in batches.
// Each answer is classified: transport errors, 429 and 5xx are retried with
// exponential backoff and jitter (at least the server's Retry-After);
// 413 splits the batch, and a single point refused with 413 is kept and
// retried (a proxy's limit is not the point's fault); only 400/422 with a
// parse, type or retention message move the rejected lines to quarantine
// (found by splitting, since resending accepted lines is idempotent);
// 401/403/404 keep everything and back off long, because the data is good
// and the configuration is not; any other answer keeps the points too.
type Sender struct {
	Spool *spool.Spool
	W     Writer
	// BatchBytes is the size a batch aims at.
	BatchBytes int
	Log        *slog.Logger
	// StaleAfter ends a refusal episode (refusals.go) in which no point
	// was refused for this long; default 30 minutes.
	StaleAfter time.Duration
	// Drain is how long a write in flight when Run's context ends may
	// still take; 0: it is cut off at once. A write cut off after the
	// server took it is sent again (Flush, the next start): InfluxDB
	// overwrites the same points, but a store that keeps every sample
	// (VictoriaMetrics without deduplication) holds them twice.
	Drain time.Duration

	mu          sync.Mutex
	sent        uint64
	retries     uint64
	lastSuccess time.Time
	lastErr     string
	configErr   string // set while InfluxDB refuses the credentials or bucket
	// episodeFails counts the failed attempts since the last success: the
	// failure is logged once, and its end with this count.
	episodeFails int
	swapped      Writer // replaces W (a reload with new credentials)
	refusing     map[group]*episode
	refused      uint64 // points InfluxDB refused for their content
	wake         chan struct{}
	once         sync.Once
}

const (
	minBackoff    = 500 * time.Millisecond
	maxBackoff    = 60 * time.Second
	configBackoff = 30 * time.Second
)

func (s *Sender) init() {
	s.once.Do(func() {
		s.wake = make(chan struct{}, 1)
		if s.BatchBytes <= 0 {
			s.BatchBytes = 1 << 20
		}
		if s.Log == nil {
			s.Log = slog.Default()
		}
	})
}

// SetWriter replaces the writer, for a reload with new InfluxDB settings;
// the next batch goes to it.
func (s *Sender) SetWriter(w Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.swapped = w
}

func (s *Sender) writer() Writer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.swapped != nil {
		return s.swapped
	}
	return s.W
}

// Notify tells the sender that new points were spooled.
func (s *Sender) Notify() {
	s.init()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Health is the delivery state for /healthz.
type Health struct {
	Sent        uint64
	Retries     uint64
	LastSuccess time.Time
	LastError   string
	// ConfigError says that InfluxDB refuses the credentials or bucket.
	ConfigError string
	// Refused counts the points InfluxDB refused for their content
	// (quarantined); Refusing lists the groups it refuses now.
	Refused  uint64
	Refusing []Refusal
}

// Health returns the delivery state.
func (s *Sender) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Health{Sent: s.sent, Retries: s.retries, LastSuccess: s.lastSuccess, LastError: s.lastErr, ConfigError: s.configErr,
		Refused: s.refused, Refusing: s.refusalsLocked(time.Now())}
}

// Run delivers spooled points until ctx ends; a write in flight then
// has Drain more to finish.
func (s *Sender) Run(ctx context.Context) {
	s.init()
	backoff := minBackoff
	for ctx.Err() == nil {
		err := s.sendDraining(ctx)
		switch {
		case errors.Is(err, errEmpty):
			// Every append notifies: nothing to do until then.
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
			continue
		case err == nil:
			backoff = minBackoff
			continue
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		var we *WriteError
		if errors.As(err, &we) {
			wait = max(wait, we.After)
			if isConfigError(we) {
				wait = max(wait, configBackoff)
			}
		}
		backoff = min(2*backoff, maxBackoff)
		s.mu.Lock()
		s.retries++
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// sendDraining is sendOne whose write outlives ctx by Drain at most.
func (s *Sender) sendDraining(ctx context.Context) error {
	if s.Drain <= 0 {
		return s.sendOne(ctx)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(s.Drain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-wctx.Done():
		}
	})
	defer stop()
	return s.sendOne(wctx)
}

// Flush delivers until the spool is empty, the first failure, or ctx
// ends; what is left stays in the spool for the next start.
func (s *Sender) Flush(ctx context.Context) error {
	s.init()
	for {
		err := s.sendOne(ctx)
		if errors.Is(err, errEmpty) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var errEmpty = errors.New("spool empty")

// sendOne delivers the oldest batch of the spool.
func (s *Sender) sendOne(ctx context.Context) error {
	b, ok, err := s.Spool.Peek(s.BatchBytes)
	if err != nil {
		return err
	}
	if !ok {
		return errEmpty
	}
	var tl tally
	written, err := s.deliver(ctx, b.Lines, &tl)
	s.mu.Lock()
	s.settleLocked(&tl, time.Now())
	s.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			s.failed(err)
		}
		return err
	}
	if err := s.Spool.Ack(b); err != nil {
		return err
	}
	s.mu.Lock()
	s.sent += uint64(written)
	s.lastSuccess = time.Now()
	if s.lastErr != "" {
		s.Log.Info("influx writes succeed again", "failed_attempts", s.episodeFails)
	}
	s.lastErr, s.configErr, s.episodeFails = "", "", 0
	s.mu.Unlock()
	return nil
}

func (s *Sender) failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := err.Error()
	s.episodeFails++
	var we *WriteError
	if errors.As(err, &we) && isConfigError(we) {
		if s.configErr == "" {
			s.Log.Error("InfluxDB refuses the credentials or the bucket; points are kept in the spool until this is fixed",
				"err", msg)
		}
		s.configErr = msg
	} else if s.lastErr == "" {
		s.Log.Warn("influx write failed; points are kept and retried", "err", msg)
	}
	s.lastErr = msg
}

func isConfigError(we *WriteError) bool {
	return we.Status == http.StatusUnauthorized || we.Status == http.StatusForbidden || we.Status == http.StatusNotFound
}

var droppedRe = regexp.MustCompile(`dropped=(\d+)`)

// deliver writes lines, splitting and quarantining what the server
// rejects for its content, and notes in tl what was taken and refused. It
// returns how many lines were written, or an error when the batch must be
// retried as a whole.
func (s *Sender) deliver(ctx context.Context, lines []byte, tl *tally) (int, error) {
	err := s.writer().Write(ctx, lines)
	n := bytes.Count(lines, []byte("\n"))
	if err == nil {
		tl.accepted = append(tl.accepted, lines)
		return n, nil
	}
	var we *WriteError
	if !errors.As(err, &we) || we.Retry {
		return 0, err
	}
	reject := contentError(we)
	switch {
	case we.Status == http.StatusRequestEntityTooLarge && n == 1:
		// One small point too large: a proxy's body limit, not the
		// point's fault. Kept and retried; /healthz says why.
		return 0, &WriteError{Status: we.Status, Retry: true, After: we.After,
			Err: fmt.Errorf("a single point of %d bytes is refused as too large (a proxy's body limit?); kept and retried: %w", len(lines), we.Err)}
	case we.Status == http.StatusRequestEntityTooLarge:
	case !reject:
		// Not a verdict on the points (a proxy's 4xx, 408, 409): kept.
		return 0, &WriteError{Status: we.Status, Retry: true, After: we.After, Err: we.Err}
	case n == 1:
		return 0, s.quarantine(we, lines, tl)
	default:
		if m := droppedRe.FindStringSubmatch(we.Error()); m != nil {
			if d, _ := strconv.Atoi(m[1]); d >= n {
				return 0, s.quarantine(we, lines, tl) // every line was refused
			}
		}
	}
	half := splitAt(lines, n/2)
	a, err := s.deliver(ctx, lines[:half], tl)
	if err != nil {
		return 0, err
	}
	b, err := s.deliver(ctx, lines[half:], tl)
	return a + b, err
}

// contentRe matches what InfluxDB (1.x and 2.x) says of points it refuses
// for what they hold.
var contentRe = regexp.MustCompile(`(?i)unable to parse|partial write|field type conflict|beyond retention|invalid (field|tag|measurement|timestamp|number|boolean)|bad timestamp|max-values-per-tag|failed to parse|unprocessable`)

// contentError tells whether InfluxDB refused the points for their
// content: 400 or 422 with a parse, type or retention message. Only those
// are quarantined; anything else may pass later.
func contentError(we *WriteError) bool {
	if we.Status != http.StatusBadRequest && we.Status != http.StatusUnprocessableEntity {
		return false
	}
	return contentRe.MatchString(we.Error())
}

// quarantine moves refused lines aside; the log and /readyz say so once
// per episode (refusals.go), not once per batch.
func (s *Sender) quarantine(we *WriteError, lines []byte, tl *tally) error {
	if err := s.Spool.Quarantine(we.Error(), lines); err != nil {
		return fmt.Errorf("quarantine rejected points: %w", err)
	}
	tl.refuse(lines, shortReason(we.Error()))
	return nil
}

// splitAt returns the offset just after the k-th newline.
func splitAt(lines []byte, k int) int {
	off := 0
	for range k {
		off += bytes.IndexByte(lines[off:], '\n') + 1
	}
	return off
}
