package tail

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/tpsmon/tpsmon/internal/wake"
)

// collector counts the lines a tailer emits.
type collector struct {
	mu    sync.Mutex
	seen  map[int]int
	other int
	last  Position
	n     int
}

func newCollector() *collector { return &collector{seen: map[int]int{}} }

func (c *collector) emit(l Line) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = l.Pos
	c.n++
	s := string(l.Text)
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "line ")); err == nil && strings.HasPrefix(s, "line ") {
		c.seen[n]++
		return
	}
	c.other++
}

// check reports lines missing or seen twice out of 0..total-1.
func (c *collector) check(t *testing.T, total int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	missing, dup := 0, 0
	for i := range total {
		switch c.seen[i] {
		case 0:
			missing++
		case 1:
		default:
			dup++
		}
	}
	if missing > 0 || dup > 0 || c.other > 0 {
		t.Errorf("of %d lines: %d missing, %d read twice, %d mangled", total, missing, dup, c.other)
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// writer appends numbered lines; rotate runs between two lines, with the
// writer held, as logrotate's copy and truncate would.
type writer struct {
	mu   sync.Mutex
	path string
	f    *os.File
	next int
}

func (w *writer) open(t *testing.T) {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.f = f
}

func (w *writer) write(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b bytes.Buffer
	for range n {
		fmt.Fprintf(&b, "line %d\n", w.next)
		w.next++
	}
	w.f.Write(b.Bytes())
}

func waitFor(t *testing.T, c *collector, total int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.count() < total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRotation(t *testing.T) {
	rotations := map[string]func(t *testing.T, w *writer, i int){
		"rename and recreate": func(t *testing.T, w *writer, i int) {
			w.f.Close()
			if err := os.Rename(w.path, w.path+".1"); err != nil {
				t.Fatal(err)
			}
			w.open(t)
		},
		"copytruncate": func(t *testing.T, w *writer, i int) {
			b, err := os.ReadFile(w.path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(w.path+".1", b, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := w.f.Truncate(0); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, rotate := range rotations {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each waits on its rotations' polls, not the CPU
			dir := t.TempDir()
			w := &writer{path: filepath.Join(dir, "server.log")}
			w.open(t)
			defer w.f.Close()
			c := newCollector()
			tl := &Tailer{Path: w.path, Poll: 5 * time.Millisecond, FromStart: true}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- tl.Run(ctx, c.emit) }()

			// A writer appends 100 lines per millisecond; 100 rotations,
			// each after a few polls, and never two before the tailer has
			// read a line written after the last one: a file rotated away twice
			// between two reads is out of reach (README, log sources), and
			// a loaded machine can hold the tailer back for longer than 20 ms.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					w.write(100)
					time.Sleep(time.Millisecond)
				}
			})
			rotatedAt := 0
			for i := range 100 {
				time.Sleep(20 * time.Millisecond)
				waitFor(t, c, rotatedAt+1)
				w.mu.Lock()
				rotate(t, w, i)
				rotatedAt = w.next
				w.mu.Unlock()
			}
			close(stop)
			wg.Wait()
			total := w.next
			waitFor(t, c, total)
			cancel()
			<-done
			c.check(t, total)
			if total < 50_000 {
				t.Errorf("only %d lines written: the writer was not fast", total)
			}
		})
	}
}

func TestKilledTailerResumes(t *testing.T) {
	dir := t.TempDir()
	w := &writer{path: filepath.Join(dir, "server.log")}
	w.open(t)
	defer w.f.Close()
	state := filepath.Join(dir, "pos.json")
	w.write(1000)

	// The consumer accepts lines and saves the position every 100 of
	// them; the first tailer dies after 550 lines, unsaved ones lost with
	// it, as in a crash.
	accepted := newCollector()
	var mu sync.Mutex
	taken := 0
	ctx, cancel := context.WithCancel(context.Background())
	first := &Tailer{Path: w.path, StateFile: state, Poll: 5 * time.Millisecond, FromStart: true}
	firstDone := make(chan struct{})
	var pending []Line
	go func() {
		first.Run(ctx, func(l Line) {
			mu.Lock()
			defer mu.Unlock()
			if taken >= 550 {
				return // dead: nothing more is accepted
			}
			taken++
			pending = append(pending, Line{Text: append([]byte(nil), l.Text...), Pos: l.Pos})
			if taken%100 == 0 {
				for _, p := range pending {
					accepted.emit(p)
				}
				pending = nil
				if err := NewPositionFile(state).Save(l.Pos); err != nil {
					t.Error(err)
				}
			}
		})
		close(firstDone)
	}()
	for {
		mu.Lock()
		n := taken
		mu.Unlock()
		if n >= 550 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-firstDone
	if accepted.count() != 500 {
		t.Fatalf("accepted %d before the kill, want 500", accepted.count())
	}

	// More lines, and a rotation while no tailer runs.
	w.write(200)
	w.f.Close()
	os.Rename(w.path, w.path+".1")
	w.open(t)
	w.write(300)

	second := &Tailer{Path: w.path, StateFile: state, Poll: 5 * time.Millisecond, FromStart: true}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { second.Run(ctx2, accepted.emit); close(done) }()
	waitFor(t, accepted, 1500)
	cancel2()
	<-done
	accepted.check(t, 1500)
}

func TestPartialLinesWaitAndHugeLinesAreBounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.log")
	f, _ := os.Create(path)
	defer f.Close()
	c := newCollector()
	var lens []int
	var mu sync.Mutex
	tl := &Tailer{Path: path, Poll: 5 * time.Millisecond, FromStart: true}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		tl.Run(ctx, func(l Line) {
			mu.Lock()
			lens = append(lens, len(l.Text))
			mu.Unlock()
			c.emit(l)
		})
		close(done)
	}()
	f.WriteString("line 0\nline ")
	time.Sleep(50 * time.Millisecond)
	if c.count() != 1 {
		t.Errorf("%d lines before the second was finished, want 1", c.count())
	}
	f.WriteString("1\n")
	f.Write(bytes.Repeat([]byte("x"), 10<<20))
	f.WriteString("\nline 2\n")
	deadline := time.Now().Add(10 * time.Second)
	for c.count() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	c.mu.Lock()
	other := c.other
	c.mu.Unlock()
	if c.count() != 3 || other != 1 {
		t.Fatalf("lines %d, others %d", c.count(), other)
	}
	mu.Lock()
	defer mu.Unlock()
	if lens[2] != MaxLine || tl.Truncated != 1 {
		t.Errorf("the 10 MB line kept %d bytes (want %d), truncated %d", lens[2], MaxLine, tl.Truncated)
	}
}

// A line is read when the file changes, not at the next poll: its time is
// when it was written, however long the poll.
func TestLinesReadOnNotification(t *testing.T) {
	path, f := createLog(t)
	lines := make(chan Line, 10)
	stop := follow(&Tailer{Path: path, Poll: time.Hour, FromStart: true}, func(l Line) { lines <- l })
	defer stop()
	time.Sleep(100 * time.Millisecond) // the tailer opens the file and watches
	for i := range 3 {
		written := time.Now()
		fmt.Fprintf(f, "line %d\n", i)
		select {
		case l := <-lines:
			if string(l.Text) != fmt.Sprintf("line %d", i) || l.Time.Before(written) || time.Since(l.Time) < 0 {
				t.Errorf("line %q read at %v, written at %v", l.Text, l.Time, written)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("line %d not read 10 s after its write, with a poll of an hour", i)
		}
	}
}

// TestBurstReadOnNotificationsAlone: a read stops at the size the poll
// saw, so the lines written while it reads must come with their own
// notifications: with no tick to fall back on, every line of a burst
// of small writes, some of them racing each read, is read once.
func TestBurstReadOnNotificationsAlone(t *testing.T) {
	path, _ := createLog(t)
	c := newCollector()
	stop := follow(&Tailer{Path: path, Poll: time.Hour, FromStart: true}, c.emit)
	defer stop()
	time.Sleep(100 * time.Millisecond) // the tailer opens the file and watches
	w := &writer{path: path}
	w.open(t)
	defer w.f.Close()
	const total = 20000
	for w.next < total {
		w.write(1 + w.next%7)
	}
	waitFor(t, c, total)
	c.check(t, total)
}

// TestLineReadBesideABusyFile: another file of the directory written
// without pause floods the watcher with events the tailer passes over;
// the log's own lines are still read on notification, each within seconds.
func TestLineReadBesideABusyFile(t *testing.T) {
	path, f := createLog(t)
	lines := make(chan Line, 10)
	stop := follow(&Tailer{Path: path, Poll: time.Hour, FromStart: true}, func(l Line) { lines <- l })
	defer stop()
	other, err := os.Create(filepath.Join(filepath.Dir(path), "other.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				other.WriteString("x\n")
			}
		}
	})
	time.Sleep(100 * time.Millisecond) // the tailer opens the file and watches
	for i := range 3 {
		fmt.Fprintf(f, "line %d\n", i)
		select {
		case l := <-lines:
			if string(l.Text) != fmt.Sprintf("line %d", i) {
				t.Errorf("read %q, want line %d", l.Text, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("line %d not read 10 s after its write beside a busy file, with a poll of an hour", i)
		}
	}
}

// TestWaitFoldsABoundedQueue: the notifications queued behind one are
// taken with it, but no more than maxFold: events that never stop coming
// do not keep the read waiting.
func TestWaitFoldsABoundedQueue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued int
	}{{"a few", 5}, {"endless", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			tl := &Tailer{Path: "/var/log/llama.log"}
			tl.setDefaults()
			w := &fsnotify.Watcher{Events: make(chan fsnotify.Event, tc.queued), Errors: make(chan error)}
			for range tc.queued {
				w.Events <- fsnotify.Event{Name: tl.Path, Op: fsnotify.Write}
			}
			tick := wake.NewTicker(time.Hour)
			defer tick.Stop()
			ticked, running := tl.wait(context.Background(), tick, w)
			if ticked || !running {
				t.Fatalf("wait: ticked %v, running %v; want a notification", ticked, running)
			}
			left := len(w.Events)
			if want := max(0, tc.queued-1-maxFold); left != want || (tc.queued == 1000) != (left > 0) {
				t.Errorf("%d events left of %d, want %d (an endless queue leaves some)", left, tc.queued, want)
			}
		})
	}
}

// TestRotationReadOnNotification: with no tick to fall back on, a rename
// rotation is seen on the notifications alone: the old file's last line
// and the new file's lines are each read once, within seconds.
func TestRotationReadOnNotification(t *testing.T) {
	path, f := createLog(t)
	lines := make(chan string, 10)
	stop := follow(&Tailer{Path: path, Poll: time.Hour, FromStart: true}, func(l Line) { lines <- string(l.Text) })
	defer stop()
	time.Sleep(100 * time.Millisecond) // the tailer opens the file and watches
	want := func(text string) {
		t.Helper()
		select {
		case l := <-lines:
			if l != text {
				t.Fatalf("read %q, want %q", l, text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q not read 10 s after its write, with a poll of an hour", text)
		}
	}
	fmt.Fprintln(f, "before")
	want("before")
	for i := range 3 {
		if err := os.Rename(path, fmt.Sprintf("%s.%d", path, i)); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "last of %d\n", i) // the writer has not reopened yet
		nf, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		f = nf
		t.Cleanup(func() { nf.Close() })
		fmt.Fprintf(f, "first of %d\n", i+1)
		want(fmt.Sprintf("last of %d", i))
		want(fmt.Sprintf("first of %d", i+1))
	}
	select {
	case l := <-lines:
		t.Errorf("read %q again", l)
	case <-time.After(200 * time.Millisecond):
	}
}

// createLog creates an empty log file, closed when the test ends.
func createLog(t *testing.T) (string, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "x.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return path, f
}

// follow runs tl until the returned stop, which waits for Run to end.
func follow(tl *Tailer, emit func(Line)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		tl.Run(ctx, emit)
		close(done)
	}()
	return func() { cancel(); <-done }
}

// TestAliveWhileNotified: a tick that follows notified reads skips the
// read but still says the file is readable; lines written all the while
// are all read once.
func TestAliveWhileNotified(t *testing.T) {
	path, f := createLog(t)
	c := newCollector()
	var mu sync.Mutex
	alive := 0
	tl := &Tailer{Path: path, Poll: 100 * time.Millisecond, FromStart: true,
		Alive: func(time.Time) { mu.Lock(); alive++; mu.Unlock() }}
	stop := follow(tl, c.emit)
	const total = 40
	for i := range total {
		fmt.Fprintf(f, "line %d\n", i)
		time.Sleep(20 * time.Millisecond) // several notified reads per tick
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		n := c.n
		c.mu.Unlock()
		if n >= total {
			break
		}
	}
	stop()
	c.check(t, total)
	mu.Lock()
	defer mu.Unlock()
	// 800 ms of writes at a 100 ms poll: ticks kept saying so.
	if alive < 3 {
		t.Errorf("Alive told %d times over %d notified lines", alive, total)
	}
}

// Reading starts at the end of an existing file, after Peek was shown its
// head; a file created after the tailer started is read whole.
func TestStartAtEndPeeksAndNewFilesReadWhole(t *testing.T) {
	cases := []struct {
		name      string
		existing  string // written before Run; "" creates the file only after
		wantPeek  string
		wantLines []string
	}{
		{"existing file", "banner\nold line\n", "banner\nold line\n", []string{"new line"}},
		{"created later", "", "", []string{"first", "new line"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.log")
			if c.existing != "" {
				os.WriteFile(path, []byte(c.existing), 0o644)
			}
			lines := make(chan string, 10)
			var mu sync.Mutex
			peeked := ""
			tl := &Tailer{Path: path, Poll: 20 * time.Millisecond,
				Peek: func(b []byte) { mu.Lock(); peeked = string(b); mu.Unlock() }}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				tl.Run(ctx, func(l Line) { lines <- string(l.Text) })
				close(done)
			}()
			defer func() { cancel(); <-done }()
			time.Sleep(100 * time.Millisecond)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if c.existing == "" {
				f.WriteString("first\n")
				time.Sleep(100 * time.Millisecond)
			}
			f.WriteString("new line\n")
			for _, want := range c.wantLines {
				select {
				case got := <-lines:
					if got != want {
						t.Errorf("line %q, want %q", got, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("no line %q", want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if peeked != c.wantPeek {
				t.Errorf("peeked %q, want %q", peeked, c.wantPeek)
			}
		})
	}
}

// TestReadBufferGrowsWithBacklog: a file with lines around and across the
// read buffer's sizes is read whole, line for line, and the buffer grows
// only as far as full reads take it.
func TestReadBufferGrowsWithBacklog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lens    []int // line lengths (without the newline), repeated
		repeat  int
		wantBuf int
	}{
		{"a few short lines", []int{7, 120}, 3, readMin},
		{"one line just over the first buffer", []int{readMin + 1}, 1, 2 * readMin},
		{"backlog of short lines", []int{90, 200}, 2000, readMax},
		{"lines up to MaxLine, across every buffer size", []int{MaxLine, 5, 3 * readMin, MaxLine - 1}, 4, readMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, f := createLog(t)
			var want []string
			for i := range tc.repeat {
				for j, n := range tc.lens {
					l := fmt.Sprintf("%d-%d:", i, j)
					l += strings.Repeat(string(rune('a'+(i+j)%26)), max(n-len(l), 0))
					want = append(want, l)
					fmt.Fprintln(f, l)
				}
			}
			var mu sync.Mutex
			var got []string
			tl := &Tailer{Path: path, Poll: 5 * time.Millisecond, FromStart: true}
			stop := follow(tl, func(l Line) {
				mu.Lock()
				got = append(got, string(l.Text))
				mu.Unlock()
			})
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n >= len(want) || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			stop()
			if len(got) != len(want) {
				t.Fatalf("%d lines read, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("line %d: %d bytes %.20q, want %d bytes %.20q", i, len(got[i]), got[i], len(want[i]), want[i])
				}
			}
			if len(tl.buf) != tc.wantBuf {
				t.Errorf("read buffer %d bytes, want %d", len(tl.buf), tc.wantBuf)
			}
		})
	}
}

// BenchmarkPollALine is a notified read of one progress line: what a
// server that logs once a second costs the tailer, less the wakeup.
func BenchmarkPollALine(b *testing.B) {
	path := filepath.Join(b.TempDir(), "server.log")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fmt.Fprintln(f, "INFO 12-05 01:00:00 engine started")
	tl := &Tailer{Path: path}
	tl.setDefaults()
	tl.buf = make([]byte, readMin)
	if err := tl.open(Position{}, false, func(Line) {}); err != nil {
		b.Fatal(err)
	}
	defer tl.f.Close()
	line := []byte("INFO 12-05 01:00:01 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 211.3 tokens/s, Running: 8 reqs\n")
	lines := 0
	emit := func(Line) { lines++ }
	for b.Loop() {
		if _, err := f.Write(line); err != nil {
			b.Fatal(err)
		}
		tl.budget = tl.perTick()
		if err := tl.poll(emit, false); err != nil {
			b.Fatal(err)
		}
	}
	if lines != b.N {
		b.Fatalf("%d lines read, want %d", lines, b.N)
	}
}
