package tail

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/statefile"
)

// failures records what a tailer tells Failed.
type failures struct {
	mu   sync.Mutex
	errs []error
	told chan struct{}
}

func newFailures() *failures { return &failures{told: make(chan struct{}, 16)} }

func (f *failures) failed(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
	f.told <- struct{}{}
}

// await waits until Failed was told n times.
func (f *failures) await(t *testing.T, n int) []error {
	t.Helper()
	for {
		f.mu.Lock()
		errs := append([]error(nil), f.errs...)
		f.mu.Unlock()
		if len(errs) >= n {
			return errs
		}
		select {
		case <-f.told:
		case <-time.After(30 * time.Second):
			t.Fatalf("Failed told %d times in 30 s, want %d: %v", len(errs), n, errs)
		}
	}
}

// TestNotRegularRefused: a log path that names a FIFO (an open of it would
// wait for a writer), a character device (/dev/zero reads forever), a
// directory, a socket, or a link to a FIFO is refused, told once with the
// path and what it is, and never read; Run ends at once when told.
func TestNotRegularRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.log")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock.log")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, tc := range []struct{ path, kind string }{
		{fifo, "a named pipe (FIFO)"},
		{"/dev/zero", "a character device"},
		{dir, "a directory"},
		{sock, "a socket"},
		{link, "a named pipe (FIFO)"},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			fails := newFailures()
			var lines, alive int
			var mu sync.Mutex
			tl := &Tailer{Path: tc.path, Poll: 5 * time.Millisecond, FromStart: true, Failed: fails.failed,
				Alive: func(time.Time) { mu.Lock(); alive++; mu.Unlock() }}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tl.Run(ctx, func(Line) { mu.Lock(); lines++; mu.Unlock() }) }()
			errs := fails.await(t, 1)
			time.Sleep(50 * time.Millisecond) // ten polls more: still said once
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after cancel")
			}
			if len(fails.errs) != 1 || !errors.Is(errs[0], statefile.ErrNotRegular) || !strings.Contains(errs[0].Error(), tc.path+" is "+tc.kind) {
				t.Errorf("Failed told %v, want once that %s is %s", fails.errs, tc.path, tc.kind)
			}
			if lines != 0 || alive != 0 {
				t.Errorf("%d lines read, %d times alive", lines, alive)
			}
		})
	}
}

// TestRotatedToNotRegular: a followed log renamed away and replaced by a
// FIFO is refused there (told once, the server no longer alive); replaced
// again by a regular file, it is read again, from its start.
func TestRotatedToNotRegular(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.log")
	if err := os.WriteFile(path, []byte("line 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fails := newFailures()
	c := newCollector()
	tl := &Tailer{Path: path, Poll: 5 * time.Millisecond, FromStart: true, Failed: fails.failed}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tl.Run(ctx, c.emit) }()
	waitFor(t, c, 1)
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	errs := fails.await(t, 1)
	if !errors.Is(errs[0], statefile.ErrNotRegular) || !strings.Contains(errs[0].Error(), "named pipe") {
		t.Fatalf("Failed told %v, want that %s is a FIFO", errs[0], path)
	}
	// Put in place by rename, as a rotation does: removed first, the path
	// would be missing for a poll, a failure of its own.
	if err := os.WriteFile(path+".new", []byte("line 1\nline 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if errs := fails.await(t, 2); errs[1] != nil || len(errs) != 2 {
		t.Errorf("Failed told %v, want the FIFO, then nil once readable", errs)
	}
	waitFor(t, c, 3)
	cancel()
	<-done
	c.check(t, 3)
}

// TestEndlessFileReadInShares: a regular file that always has more (a
// sparse 1 TiB of zeros, no newline) is read maxPerSecond a second, in
// shares a poll interval each, not as fast as the disk gives: the tailer
// neither spins a core nor holds up its stop.
func TestEndlessFileReadInShares(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endless.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var mu sync.Mutex
	reads := 0
	tl := &Tailer{Path: path, Poll: 10 * time.Millisecond, FromStart: true, created: true,
		Flush: func() { mu.Lock(); reads++; mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- tl.Run(ctx, func(Line) {}) }()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	// Every read is at most readMax: the bytes read are at most that many
	// reads' worth, and no more than the shares of the time it ran.
	elapsed := time.Since(start)
	limit := int(float64(maxPerSecond)*elapsed.Seconds())/readMax + int(elapsed/tl.Poll) + 2
	mu.Lock()
	defer mu.Unlock()
	if reads == 0 || reads > limit {
		t.Errorf("%d reads of up to %d bytes in %v, want 1 to %d", reads, readMax, elapsed, limit)
	}
	if tl.Truncated != 1 {
		t.Errorf("%d over-long lines counted, want the one", tl.Truncated)
	}
}
