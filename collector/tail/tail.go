// Package tail follows a log file the way an SRE expects: through rename
// rotation and copytruncate, without losing or repeating a line, and
// across restarts, from a position saved only once the consumer has taken
// the lines before it.
package tail

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/internal/wake"
)

// Position says where reading stopped: which file (device, inode, and a
// fingerprint of its first bytes, which tells a truncated or replaced file
// from the same one) and the offset after the last line taken.
type Position struct {
	Path   string `json:"path"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	Offset int64  `json:"offset"`
	Head   string `json:"head"` // hex of the file's first bytes
	// Cursor is the journal's position, for a journald source.
	Cursor string `json:"cursor,omitempty"`
}

// Line is one complete line of the file (without its newline), and the
// position just after it.
type Line struct {
	// Text is valid only until emit returns: it points into the reader's
	// buffer, which the next line reuses.
	Text []byte
	Time time.Time
	Pos  Position
}

// headLen is how many leading bytes fingerprint a file.
const headLen = 64

// MaxLine bounds a line kept in memory; the rest of a longer line is
// skipped (and counted), so a 10 MB line does not grow the tailer. It is
// also all that the log parsers and replay look at of a line.
const MaxLine = 64 << 10

// The read buffer starts at readMin and doubles, up to readMax, each time
// a read fills it: a log written a few lines a second is read with 4 KiB
// held for good (a daemon's live heap is counted twice in its heap goal),
// a backlog or a firehose soon with 64 KiB reads.
const (
	readMin = 4 << 10
	readMax = 64 << 10
)

// Tailer follows one file.
type Tailer struct {
	Path string
	// StateFile holds the saved position ("" = start fresh each time).
	StateFile string
	// Resume, when set, is where reading starts instead of StateFile's
	// position: what the consumer took from the Tailer this one follows
	// (a reload restarts the sources), newer than the file's.
	Resume *Position
	// Poll is how often the file is read besides when it changes (file
	// systems without notification), and how often Alive is told.
	Poll time.Duration
	// FromStart reads a file with no saved position from its start; by
	// default reading starts at its end.
	FromStart bool
	Log       *slog.Logger
	Now       func() time.Time
	// Alive is told each time the file was read without error: a quiet
	// log is an idle server, not a lost one.
	Alive func(time.Time)
	// Peek is shown the head of a file that reading starts past (its
	// first 64 KiB): lines written before, not to count, but to say what
	// wrote them.
	Peek func(head []byte)
	// Flush is told after each read's lines were emitted (nil: not
	// told): a consumer that gathers what a read's lines said hands it
	// on in one piece, and before Alive.
	Flush func()
	// Failed is told why the log cannot be read (it is no regular file,
	// it cannot be opened or read) when that changes, and nil once it can
	// be again; each reason is logged once. Meanwhile Alive is not told:
	// the server reads as down.
	Failed  func(error)
	created bool // the file did not exist when Run began
	failing string

	// budget is what may still be read before the next tick: a file that
	// always has more (a huge sparse one, a firehose) is read maxPerSecond
	// a second, not with a whole core; behind says the last read stopped
	// there, with more to read.
	budget int64
	behind bool

	f       *os.File
	pos     Position
	partial []byte
	skipLen int // bytes of an over-long line being skipped
	// Truncated counts lines cut at MaxLine.
	Truncated uint64
	buf       []byte
	// headBuf holds the head read by each poll; known is t.pos.Head
	// decoded, for knownOf (a poll compares bytes, not hex).
	headBuf [headLen]byte
	known   []byte
	knownOf string
	// entries says the watcher saw an entry of the file's directory
	// created, renamed or removed, or lost events, since the path was
	// last looked at: a read on notification looks for a rename rotation
	// only then (a read on the tick always does).
	entries bool
}

// sameKnownHead is sameHead(t.pos.Head, head) without decoding the hex on
// every poll.
func (t *Tailer) sameKnownHead(head []byte) bool {
	if t.knownOf != t.pos.Head || t.known == nil {
		b, err := hex.DecodeString(t.pos.Head)
		if err != nil {
			return false
		}
		t.known, t.knownOf = b, t.pos.Head
	}
	n := min(len(t.known), len(head))
	return bytes.Equal(t.known[:n], head[:n])
}

// LoadPosition reads a saved position; a missing file is no position.
func LoadPosition(file string) (Position, bool, error) {
	b, err := statefile.ReadRecord(file)
	if errors.Is(err, fs.ErrNotExist) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, err
	}
	var p Position
	if err := json.Unmarshal(b, &p); err != nil {
		return Position{}, false, fmt.Errorf("tail: position %s: %w", file, err)
	}
	return p, true, nil
}

// PositionFile keeps a log's position in its state file, rewritten in
// place and synced at each save (statefile.Record): after a crash or a
// power loss it holds the last position saved, so no line is counted
// twice. One goroutine saves.
type PositionFile struct{ rec statefile.Record }

// NewPositionFile returns the position file at path.
func NewPositionFile(path string) *PositionFile {
	return &PositionFile{rec: statefile.Record{Path: path, Durable: true}}
}

// Save writes p. The consumer calls it once the lines up to p are
// accepted.
func (f *PositionFile) Save(p Position) error {
	b, _ := json.Marshal(p)
	if err := f.rec.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("tail: save position: %w", err)
	}
	return nil
}

func fileID(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino
	}
	return 0, 0
}

// readHead returns up to headLen leading bytes of f.
func readHead(f *os.File) []byte {
	b := make([]byte, headLen)
	n, _ := f.ReadAt(b, 0)
	return b[:n]
}

// maxPerSecond bounds the bytes read a second, given out a poll interval
// at a time (perTick): 16 MiB, hundreds of times what a busy server logs,
// and tens of milliseconds of CPU.
const maxPerSecond = 16 << 20

// perTick is what one poll interval may read: its share of maxPerSecond,
// one full read at least.
func (t *Tailer) perTick() int64 {
	return max(readMax, int64(float64(maxPerSecond)*t.Poll.Seconds()))
}

// Run follows the file until ctx ends, handing each complete line to
// emit. A file that does not exist yet, or cannot be read (Failed), is
// waited for. It returns once ctx ends, whatever the file does: nothing it
// does blocks (statefile.OpenRegular) or reads without bound (maxPerSecond).
func (t *Tailer) Run(ctx context.Context, emit func(Line)) error {
	t.setDefaults()
	t.buf = make([]byte, readMin)
	t.budget = t.perTick()
	defer func() {
		if t.f != nil {
			t.f.Close()
		}
	}()
	var saved Position
	var have bool
	if t.Resume != nil {
		saved, have = *t.Resume, true
	} else if t.StateFile != "" {
		var err error
		if saved, have, err = LoadPosition(t.StateFile); err != nil {
			t.Log.Warn("tail: ignoring unreadable position", "err", err)
		}
	}
	tick := wake.NewTicker(t.Poll)
	defer tick.Stop()
	// Notification reads a line within milliseconds of its write, so its
	// time is when it was written; the ticker stays for file systems that
	// do not notify, and to say the file is still readable.
	w, err := t.watch()
	if err != nil {
		t.Log.Warn("tail: no file notification, polling", "path", t.Path, "every", t.Poll, "err", err)
	} else {
		defer w.Close()
	}
	if open, err := t.awaitFile(ctx, saved, have, tick, w, emit); !open {
		return err
	}
	ticked, running := true, true
	var notifiedAt time.Time // the last notified read without error
	for {
		notifiedAt = t.step(ticked, notifiedAt, emit)
		if ticked, running = t.wait(ctx, tick, w); !running {
			return nil
		}
		if ticked {
			t.budget = t.perTick()
		}
	}
}

func (t *Tailer) setDefaults() {
	if t.Poll <= 0 {
		// Windows wait seconds for late lines anyway; polling faster only
		// costs wakeups.
		t.Poll = time.Second
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	if t.Log == nil {
		t.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// awaitFile opens the file, waiting for it to be created or to become
// readable (told to Failed); false when ctx ended first.
func (t *Tailer) awaitFile(ctx context.Context, saved Position, have bool, tick *wake.Ticker, w *fsnotify.Watcher, emit func(Line)) (bool, error) {
	for t.f == nil {
		err := t.open(saved, have, emit)
		if t.f != nil {
			t.fail(nil)
			break
		}
		if errors.Is(err, fs.ErrNotExist) {
			// Created after we started: all of it is new.
			t.created = true
		} else {
			t.fail(err)
		}
		if _, running := t.wait(ctx, tick, w); !running {
			return false, nil
		}
	}
	return true, nil
}

// step reads what the file gained after a tick (ticked) or a notification,
// and returns the time of the last notified read without error.
func (t *Tailer) step(ticked bool, notifiedAt time.Time, emit func(Line)) time.Time {
	now := t.Now()
	if t.f == nil {
		// Rotated to what could not be opened: try again.
		if err := t.reopen(); err != nil {
			t.fail(err)
			return notifiedAt
		}
	}
	if ticked && !t.behind && now.Sub(notifiedAt) < t.Poll {
		// A notified read since the last tick left nothing to find:
		// the tick only says the file is still readable.
		if t.Alive != nil {
			t.Alive(now)
		}
		return notifiedAt
	}
	if t.budget <= 0 {
		return notifiedAt // this tick's share is read; the next tick reads on
	}
	checkPath := ticked || t.entries
	t.entries = false
	if err := t.poll(emit, checkPath); err != nil {
		t.fail(err)
		return notifiedAt
	}
	t.fail(nil)
	if !ticked {
		notifiedAt = now
	} else if t.Alive != nil {
		t.Alive(now)
	}
	return notifiedAt
}

// fail says why the file cannot be read, once per reason, and that it can
// again (err nil) after it could not.
func (t *Tailer) fail(err error) {
	switch {
	case err != nil && err.Error() != t.failing:
		t.failing = err.Error()
		t.Log.Warn("tail: log unreadable; the server reads as down until it is", "path", t.Path, "err", err)
		if t.Failed != nil {
			t.Failed(err)
		}
	case err == nil && t.failing != "":
		t.failing = ""
		t.Log.Info("tail: log readable again", "path", t.Path)
		if t.Failed != nil {
			t.Failed(nil)
		}
	}
}

// reopen opens the file that replaced the one read (rename rotation),
// from its start: all of it is new.
func (t *Tailer) reopen() error {
	f, fi, err := statefile.OpenRegular(t.Path)
	if err != nil {
		return err
	}
	dev, ino := fileID(fi)
	t.f, t.pos = f, Position{Path: t.Path, Dev: dev, Ino: ino, Head: hex.EncodeToString(readHead(f))}
	t.partial, t.skipLen = t.partial[:0], 0
	t.Log.Info("tail: file rotated (renamed)", "path", t.Path)
	return nil
}

// watch notifies of changes to the file's directory entry and contents:
// writes, truncation, rotation by rename, creation. The tailer reads its
// events itself (wait): a goroutine passing them on was one more wakeup
// per line written.
func (t *Tailer) watch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(filepath.Dir(t.Path)); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// wait waits for the tick (ticked), or a notification that concerns the
// file, with those already queued behind it: events that arrive while a
// read is pending fold into the next. running is false once ctx ended.
func (t *Tailer) wait(ctx context.Context, tick *wake.Ticker, w *fsnotify.Watcher) (ticked, running bool) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	for notified, folded := false, 0; ; {
		if notified {
			// At most maxFold: a directory written without pause would
			// keep the read waiting.
			if folded++; folded > maxFold {
				return false, true
			}
			select {
			case ev, ok := <-events:
				if !ok {
					return false, true
				}
				t.note(ev)
				continue
			case err, ok := <-errs:
				if !ok {
					return false, true
				}
				t.lost(err)
				continue
			default:
				return false, true
			}
		}
		select {
		case <-ctx.Done():
			return false, false
		case <-tick.C:
			tick.Next()
			return true, true
		case ev, ok := <-events:
			if !ok {
				events = nil // closed: the tick goes on
				continue
			}
			notified = t.note(ev)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			t.lost(err)
			notified = true
		}
	}
}

// maxFold bounds the queued notifications one read takes with it.
const maxFold = 64

// note takes one event of the file's directory; true when it concerns
// the file.
func (t *Tailer) note(ev fsnotify.Event) bool {
	if ev.Name != t.Path && !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Rename) {
		return false // another file in the directory was written
	}
	if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove) {
		t.entries = true
	}
	return true
}

// lost takes the watcher's error: events may be lost, so the path is
// looked at again.
func (t *Tailer) lost(err error) {
	t.Log.Warn("tail: file notification", "path", t.Path, "err", err)
	t.entries = true
}

// open opens the file, resuming at the saved position when it still
// names this file, or reading the rest of the rotated file it names.
func (t *Tailer) open(saved Position, have bool, emit func(Line)) error {
	f, fi, err := statefile.OpenRegular(t.Path)
	if err != nil {
		return err
	}
	dev, ino := fileID(fi)
	head := readHead(f)
	t.f, t.pos = f, Position{Path: t.Path, Dev: dev, Ino: ino, Head: hex.EncodeToString(head)}
	switch {
	case have && saved.Dev == dev && saved.Ino == ino && fi.Size() >= saved.Offset && sameHead(saved.Head, head):
		t.pos.Offset = saved.Offset
	case have:
		// Rotated while we were down: finish the old file first, then all
		// of the new one.
		if old := t.findRotated(saved); old != "" {
			t.drainFile(old, saved, emit)
		}
	case !t.FromStart && !t.created:
		t.pos.Offset = fi.Size()
	}
	if t.Peek != nil && t.pos.Offset > 0 {
		// Lines written before: start-up banners say which server this is.
		b := make([]byte, min(t.pos.Offset, peekLen))
		n, _ := f.ReadAt(b, 0)
		t.Peek(b[:n])
	}
	return nil
}

// peekLen bounds the head of a file shown to Peek.
const peekLen = 64 << 10

// sameHead tells whether a file's first bytes still start as saved.
func sameHead(saved string, head []byte) bool {
	s, err := hex.DecodeString(saved)
	if err != nil {
		return false
	}
	n := min(len(s), len(head))
	return bytes.Equal(s[:n], head[:n])
}

// poll checks the open file for truncation, reads what was appended,
// then, when checkPath says so, checks the path for a rename rotation.
// The file's size is asked for only when nothing followed the last line
// read: a read that returns bytes shows the file was not cut below it, so
// a poll that finds a line costs two system calls (head and data), not
// four. A quiet file's poll costs three (its size too), one more than
// before; a log that writes is read on notification, not on the tick.
func (t *Tailer) poll(emit func(Line), checkPath bool) error {
	n, err := pread(t.f, t.headBuf[:], 0)
	if err != nil {
		return err
	}
	head := t.headBuf[:n]
	switch {
	case !t.sameKnownHead(head):
		t.truncated(head, emit)
	case len(head) > len(t.pos.Head)/2:
		t.pos.Head = hex.EncodeToString(head) // the fingerprint grows with a young file
	}
	more, got, err := t.readAll(t.f, &t.pos, emit, &t.budget)
	if err == nil && got == 0 {
		size, serr := t.size()
		if serr != nil {
			return serr
		}
		if size < t.pos.Offset+int64(len(t.partial)+t.skipLen) {
			// Cut below the last line after the head above was read: that
			// head may be the old file's, and kept as the new one's it
			// would read as a second truncation, whose copy is read again.
			if n, err = pread(t.f, t.headBuf[:], 0); err != nil {
				return err
			}
			t.truncated(t.headBuf[:n], emit)
			more, _, err = t.readAll(t.f, &t.pos, emit, &t.budget)
		}
	}
	if t.behind = more; err != nil || more {
		// Behind: the rest of this file first, rotated or not.
		return err
	}
	if !checkPath {
		return nil
	}
	pfi, err := os.Stat(t.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // renamed away, not recreated yet: keep the old one
	}
	if err != nil {
		return err
	}
	dev, ino := fileID(pfi)
	if dev == t.pos.Dev && ino == t.pos.Ino {
		return nil
	}
	// Rename rotation: take the old file's last writes, then the new
	// file, which must be a regular file too (else step tries again).
	if more, _, err = t.readAll(t.f, &t.pos, emit, &t.budget); err != nil || more {
		t.behind = more
		return err
	}
	t.flushPartial(emit)
	t.f.Close()
	t.f = nil
	if err := t.reopen(); err != nil {
		return err
	}
	t.behind, _, err = t.readAll(t.f, &t.pos, emit, &t.budget)
	return err
}

// truncated starts the file over after a copytruncate, whose new head
// is head: what was written between the last read and the truncation
// lives in the copy, and is read there first.
func (t *Tailer) truncated(head []byte, emit func(Line)) {
	old := t.pos
	if rotated := t.findRotated(old); rotated != "" {
		t.drainFile(rotated, old, emit)
	}
	t.flushPartial(emit)
	t.pos = Position{Path: t.Path, Dev: old.Dev, Ino: old.Ino, Head: hex.EncodeToString(head)}
	t.Log.Info("tail: file truncated (copytruncate)", "path", t.Path)
}

// findRotated looks for the rotated copy of the file pos described:
// another file next to it whose first bytes match and that reaches the
// offset. Newest first.
func (t *Tailer) findRotated(pos Position) string {
	cands, _ := filepath.Glob(t.Path + "*")
	more, _ := filepath.Glob(t.Path[:len(t.Path)-len(filepath.Ext(t.Path))] + "*")
	cands = append(cands, more...)
	type cand struct {
		path string
		mod  time.Time
	}
	var cs []cand
	seen := map[string]bool{}
	for _, c := range cands {
		if c == t.Path || seen[c] {
			continue
		}
		seen[c] = true
		fi, err := os.Stat(c)
		if err != nil || !fi.Mode().IsRegular() || fi.Size() < pos.Offset {
			continue // a FIFO or device beside the log is no rotated copy of it
		}
		cs = append(cs, cand{c, fi.ModTime()})
	}
	sort.Slice(cs, func(a, b int) bool { return cs[a].mod.After(cs[b].mod) })
	for _, c := range cs {
		f, fi, err := statefile.OpenRegular(c.path)
		if err != nil {
			continue
		}
		dev, ino := fileID(fi)
		head := readHead(f)
		f.Close()
		if (dev == pos.Dev && ino == pos.Ino) || (len(head) > 0 && sameHead(pos.Head, head) && len(pos.Head) >= 2) {
			return c.path
		}
	}
	return ""
}

// drainFile reads path from pos.Offset to its end, or maxPerSecond of it:
// what was written to a rotated copy between the last read and the
// rotation is seconds of log, and a copy that holds more is not followed.
func (t *Tailer) drainFile(path string, pos Position, emit func(Line)) {
	f, _, err := statefile.OpenRegular(path)
	if err != nil {
		return
	}
	defer f.Close()
	p := pos
	left := int64(maxPerSecond)
	if more, _, _ := t.readAll(f, &p, emit, &left); more {
		t.Log.Warn("tail: the rotated copy holds more than is read of one; its rest is skipped", "path", path,
			"read", maxPerSecond)
	}
	t.flushPartial(emit)
}

// size is the open file's size now, by a system call alone: os.File.Stat
// builds a FileInfo (an allocation, the name's base) on every call.
func (t *Tailer) size() (int64, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Fstat(int(t.f.Fd()), &st)
		if err == nil {
			return st.Size, nil
		}
		if err != syscall.EINTR {
			return 0, &os.PathError{Op: "fstat", Path: t.f.Name(), Err: err}
		}
	}
}

// readAll reads f from pos.Offset to its end, emitting complete lines
// and advancing pos past each, until it has read budget bytes (taken off
// budget); more says it stopped there, not at the end, got how many bytes
// it read. A read that does not fill the buffer found the end: the read
// that would return nothing is not made, and what was written since comes
// with its own notification, or the next tick.
func (t *Tailer) readAll(f *os.File, pos *Position, emit func(Line), budget *int64) (more bool, got int64, err error) {
	for *budget > 0 {
		at := pos.Offset + int64(len(t.partial)) + int64(t.skipLen)
		n, err := pread(f, t.buf, at)
		if n > 0 {
			got += int64(n)
			*budget -= int64(n)
			t.split(t.buf[:n], pos, emit)
			t.flushed()
		}
		if err != nil {
			return false, got, err
		}
		if n < len(t.buf) {
			return false, got, nil
		}
		if n < readMax {
			t.buf = make([]byte, 2*n)
		}
	}
	return true, got, nil
}

// pread reads f at off by one system call: os.File.ReadAt reads on until
// it fills b, and a buffer a line does not fill took a second call to
// find the end. n is 0, without an error, at the end.
func pread(f *os.File, b []byte, off int64) (n int, err error) {
	for {
		n, err = syscall.Pread(int(f.Fd()), b, off)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return 0, &os.PathError{Op: "pread", Path: f.Name(), Err: err}
	}
	return n, nil
}

// split cuts data (which follows any partial line) into lines. They take
// the time of the read, a nanosecond apart in their order: lines sharing a
// time would leave the spans between them (the tokens a progress line
// adds since the one before) no length, and reading the clock for each
// line cost as much as parsing it.
func (t *Tailer) split(data []byte, pos *Position, emit func(Line)) {
	now := t.Now()
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			t.keep(data)
			return
		}
		line := data[:i] // whole in the buffer: handed over without a copy
		if len(t.partial) > 0 || t.skipLen > 0 || i > MaxLine {
			t.keep(data[:i])
			line = t.partial
		}
		lineLen := int64(len(line)+t.skipLen) + 1
		// The partial line's buffer is reused: emit must not keep Text.
		t.partial, t.skipLen = t.partial[:0], 0
		pos.Offset += lineLen
		emit(Line{Text: line, Time: now, Pos: *pos})
		now = now.Add(time.Nanosecond)
		data = data[i+1:]
	}
}

// keep adds to the partial line, up to MaxLine; beyond it bytes are only
// counted.
func (t *Tailer) keep(b []byte) {
	room := MaxLine - len(t.partial)
	if room > len(b) {
		room = len(b)
	}
	if room > 0 {
		t.partial = append(t.partial, b[:room]...)
	}
	if extra := len(b) - room; extra > 0 {
		if t.skipLen == 0 {
			t.Truncated++
		}
		t.skipLen += extra
	}
}

// flushPartial drops an unterminated last line of a file left behind:
// no more bytes will come to finish it.
func (t *Tailer) flushPartial(emit func(Line)) {
	if len(t.partial) > 0 || t.skipLen > 0 {
		emit(Line{Text: t.partial, Time: t.Now(), Pos: t.pos})
		t.flushed()
	}
	t.partial, t.skipLen = nil, 0
}

func (t *Tailer) flushed() {
	if t.Flush != nil {
		t.Flush()
	}
}
