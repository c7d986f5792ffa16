package sink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sink/spool"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func lines(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "m,host=h v=%d %d\n", i, 1000+i)
	}
	return b.Bytes()
}

// fakeInflux answers each write with the status its policy chooses and
// records what it stored.
type fakeInflux struct {
	mu     sync.Mutex
	stored []string
	calls  int
	policy func(call int, body []string) (status int, msg string)
}

func (f *fakeInflux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	body := strings.Split(strings.TrimSpace(string(b)), "\n")
	f.mu.Lock()
	f.calls++
	status, msg := f.policy(f.calls, body)
	if status == http.StatusNoContent {
		f.stored = append(f.stored, body...)
	}
	f.mu.Unlock()
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("X-Influxdb-Error", msg)
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":%q}`, msg)
}

func newSender(t *testing.T, f *fakeInflux) (*Sender, *spool.Spool, string) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	sp, err := spool.Open(spool.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := NewInflux(InfluxConfig{URL: srv.URL, Bucket: "db", Timeout: 5 * time.Second})
	t.Cleanup(in.Close)
	return &Sender{Spool: sp, W: in, Log: quiet()}, sp, dir
}

func TestSenderClassifies(t *testing.T) {
	tests := []struct {
		name        string
		policy      func(call int, body []string) (int, string)
		wantStored  int
		wantQuarant int
		wantErr     bool // Flush leaves points in the spool
	}{
		{"accepted", func(int, []string) (int, string) { return 204, "" }, 10, 0, false},
		{"413 splits until it fits", func(_ int, body []string) (int, string) {
			if len(body) > 3 {
				return 413, "Request Entity Too Large"
			}
			return 204, ""
		}, 10, 0, false},
		{"400 partial write: only the bad line is quarantined", func(_ int, body []string) (int, string) {
			for _, l := range body {
				if strings.Contains(l, "v=7 ") {
					// InfluxDB 1.x stores the good lines and says so.
					return 400, "partial write: field type conflict: input field \"v\" on measurement \"m\" is type float, already exists as type integer dropped=1"
				}
			}
			return 204, ""
		}, 9, 1, false},
		{"every line beyond retention", func(_ int, body []string) (int, string) {
			return 400, fmt.Sprintf("partial write: points beyond retention policy dropped=%d", len(body))
		}, 0, 10, false},
		{"503 kept for later", func(int, []string) (int, string) { return 503, "unavailable" }, 0, 0, true},
		{"401 kept for later", func(int, []string) (int, string) { return 401, "authorization failed" }, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeInflux{policy: tt.policy}
			s, sp, dir := newSender(t, f)
			sp.Append(lines(10))
			err := s.Flush(context.Background())
			if (err != nil) != tt.wantErr {
				t.Fatalf("Flush: %v", err)
			}
			st := sp.Stats()
			if got := len(f.stored); got != tt.wantStored {
				t.Errorf("stored %d lines, want %d", got, tt.wantStored)
			}
			if int(st.Quarantined) != tt.wantQuarant {
				t.Errorf("quarantined %d, want %d", st.Quarantined, tt.wantQuarant)
			}
			if tt.wantErr && st.Points != 10 {
				t.Errorf("%d points left in the spool, want all 10 kept", st.Points)
			}
			if !tt.wantErr && st.Points != 0 {
				t.Errorf("%d points left in the spool", st.Points)
			}
			if tt.wantQuarant > 0 {
				q, _ := os.ReadFile(filepath.Join(dir, "quarantine", "rejected.lp"))
				if !strings.Contains(string(q), "HTTP 400") || !strings.Contains(string(q), "partial write") {
					t.Errorf("quarantine lacks the server's message: %q", q)
				}
			}
		})
	}
}

func TestSenderReportsConfigErrorThenRecovers(t *testing.T) {
	var mu sync.Mutex
	status := 401
	f := &fakeInflux{policy: func(int, []string) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		return status, "authorization failed"
	}}
	s, sp, _ := newSender(t, f)
	sp.Append(lines(4))
	if err := s.Flush(context.Background()); err == nil {
		t.Fatal("401 flushed")
	}
	if h := s.Health(); !strings.Contains(h.ConfigError, "401") {
		t.Errorf("health does not say the credentials are refused: %+v", h)
	}
	mu.Lock()
	status = 204
	mu.Unlock()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := s.Health(); h.ConfigError != "" || h.Sent != 4 || h.LastSuccess.IsZero() {
		t.Errorf("health after recovery %+v", h)
	}
}

func TestSenderRunRetriesHonouringRetryAfter(t *testing.T) {
	f := &fakeInflux{policy: func(call int, _ []string) (int, string) {
		if call <= 2 {
			return 429, "slow down"
		}
		return 204, ""
	}}
	s, sp, _ := newSender(t, f)
	sp.Append(lines(3))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	go s.Run(ctx)
	for sp.Stats().Points > 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if ctx.Err() != nil {
		t.Fatal("never delivered")
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("delivered after %v; two Retry-After: 1 answers mean at least 2s", d)
	}
	if h := s.Health(); h.Retries != 2 || h.Sent != 3 {
		t.Errorf("health %+v", h)
	}
}

// takingWriter is a server that takes each write's lines as it arrives
// and answers when released; a client cut off before the answer returns
// its context's error, not knowing the lines were taken.
type takingWriter struct {
	mu      sync.Mutex
	taken   int
	arrived chan struct{}
	release chan struct{}
}

func (w *takingWriter) Write(ctx context.Context, b []byte) error {
	w.mu.Lock()
	w.taken += bytes.Count(b, []byte("\n"))
	w.mu.Unlock()
	select {
	case w.arrived <- struct{}{}:
	default:
	}
	select {
	case <-w.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSenderDrainsWriteInFlight: a write in flight when Run is stopped
// is let finish within Drain, so the Flush after it sends nothing twice;
// cut off (no Drain, or a server slower than it), its points stay
// spooled and are sent again.
func TestSenderDrainsWriteInFlight(t *testing.T) {
	tests := []struct {
		name      string
		drain     time.Duration
		answers   bool // the server answers once Run was stopped
		wantTaken int
	}{
		{"drained", 10 * time.Second, true, 3},
		{"cut off at once", 0, false, 6},
		{"server slower than the drain", 50 * time.Millisecond, false, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer sp.Close()
			if err := sp.Append(lines(3)); err != nil {
				t.Fatal(err)
			}
			w := &takingWriter{arrived: make(chan struct{}, 1), release: make(chan struct{})}
			s := &Sender{Spool: sp, W: w, Log: quiet(), Drain: tt.drain}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { s.Run(ctx); close(done) }()
			<-w.arrived
			cancel()
			if tt.answers {
				close(w.release)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return")
			}
			if !tt.answers {
				close(w.release)
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if w.taken != tt.wantTaken {
				t.Errorf("the server took %d lines, want %d", w.taken, tt.wantTaken)
			}
		})
	}
}
