// Package spool is tpsmon's durable delivery queue: points are appended to
// segment files in the state directory before any send, and removed only
// after InfluxDB accepted them, so outages, restarts and crashes lose
// nothing that was accepted.
package spool

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/internal/statefile"
)

// Options configure a spool.
type Options struct {
	Dir string
	// MaxBytes bounds the unsent data; when full, the oldest segments go.
	MaxBytes int64
	// SegmentBytes is where a segment is rolled; the unit of dropping.
	// Default: MaxBytes/16, between 64 KiB and 16 MiB.
	SegmentBytes int64
	// QuarantineMaxBytes bounds the quarantine directory (quarantine.go);
	// default 64 MiB.
	QuarantineMaxBytes int64
	FS                 FS // default OS
	Log                *slog.Logger
}

// ErrAppend marks points that could not be written to the spool (full
// disk, I/O error): they are counted as dropped.
var ErrAppend = errors.New("spool append failed")

const (
	segSuffix  = ".lps"
	cursorName = "cursor"
	quarDir    = "quarantine"
)

type segment struct {
	seq   uint64
	size  int64
	lines int
}

func (s *Spool) segPath(seq uint64) string {
	return filepath.Join(s.opts.Dir, fmt.Sprintf("%016d%s", seq, segSuffix))
}

// Spool is safe for one appender and one sender at a time.
type Spool struct {
	opts Options

	mu     sync.Mutex
	segs   []*segment // oldest first; the last one is appended to
	active File
	// off and ackedLines locate the first unsent record in segs[0].
	off        int64
	ackedLines int
	// cursor is where off is kept between runs.
	cursor statefile.Record

	dropped      uint64 // points lost to a full spool or failed appends
	dropping     bool   // inside a drop episode (logged once, at its start and end)
	episodeStart uint64 // dropped when the episode began
	quarantined  uint64 // points moved aside
	quarBytes    int64  // corrupt bytes moved aside at recovery
	appendErrors uint64
	// The quarantine's files, and what its bound made go, under qmu
	// (taken after mu): removing a large file to keep the bound must not
	// hold up appends.
	qmu               sync.Mutex
	quar              map[string]*quarFile
	quarDroppedPoints uint64
	quarDroppedBytes  int64
}

// Open opens (or creates) the spool in opts.Dir and recovers it: corrupt
// or torn record tails are moved to the quarantine directory and the good
// prefix kept. The directory and its quarantine must be tpsmon's own
// (statefile.EnsureDir): segments in another user's would be delivered as
// tpsmon's. The daemon's lock on it is the agent's (statefile.Lock).
func Open(opts Options) (*Spool, error) {
	if opts.FS == nil {
		opts.FS = OS{}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 1 << 30
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = min(max(opts.MaxBytes/16, 64<<10), 16<<20)
	}
	if opts.QuarantineMaxBytes <= 0 {
		opts.QuarantineMaxBytes = defaultQuarantineMax
	}
	for _, d := range []string{opts.Dir, filepath.Join(opts.Dir, quarDir)} {
		if err := statefile.EnsureDir(d); err != nil {
			return nil, fmt.Errorf("spool: %w", err)
		}
	}
	s := &Spool{opts: opts, cursor: statefile.Record{Path: filepath.Join(opts.Dir, cursorName)}}
	if err := s.loadQuarantine(); err != nil {
		return nil, err
	}
	if err := s.recover(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Spool) recover() error {
	entries, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil {
			continue
		}
		s.segs = append(s.segs, &segment{seq: seq})
	}
	sort.Slice(s.segs, func(a, b int) bool { return s.segs[a].seq < s.segs[b].seq })

	curSeq, curOff := s.readCursor()
	// Segments before the cursor were sent.
	for len(s.segs) > 0 && s.segs[0].seq < curSeq {
		s.opts.FS.Remove(s.segPath(s.segs[0].seq))
		s.segs = s.segs[1:]
	}
	if len(s.segs) == 0 || s.segs[0].seq != curSeq {
		curOff = 0
	}
	for i, sg := range s.segs {
		sent := int64(0)
		if i == 0 {
			sent = curOff
		}
		boundaries, err := s.scan(sg, sent)
		if err != nil {
			return err
		}
		if i == 0 {
			// The cursor must sit on a record boundary; if not, resend
			// from the one before it (writes are idempotent).
			s.off, s.ackedLines = 0, 0
			for _, b := range boundaries {
				if b.old <= curOff {
					s.off, s.ackedLines = b.off, b.lines
				}
			}
		}
	}
	if len(s.segs) == 0 {
		return s.roll()
	}
	last := s.segs[len(s.segs)-1]
	f, err := s.opts.FS.OpenFile(s.segPath(last.seq), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	s.active = f
	if p := s.pendingLinesLocked(); p > 0 {
		s.opts.Log.Info("spool: resuming", "points", p, "bytes", s.pendingBytesLocked(), "segments", len(s.segs))
	}
	return nil
}

type boundary struct {
	off   int64 // in the segment as kept
	old   int64 // in the segment as found
	lines int   // lines before off
}

// scan reads a segment's records, counting lines. A corrupt record costs
// that record only: its bytes go to quarantine, reading resumes at the
// next record header that checks out, and the segment is rewritten
// without them. Damage before sent (the cursor) was already dealt with
// when it was sent, and is dropped silently.
func (s *Spool) scan(sg *segment, sent int64) ([]boundary, error) {
	path := s.segPath(sg.seq)
	data, err := readFileNoFollow(path)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	var kept []byte
	var bad []span
	lines := 0
	bs := []boundary{{0, 0, 0}}
	for off := 0; off < len(data); {
		rec, err := readRecord(bufio.NewReader(bytes.NewReader(data[off:])))
		if err == nil {
			kept = append(kept, data[off:off+int(rec.size)]...)
			off += int(rec.size)
			lines += rec.lines
			bs = append(bs, boundary{int64(len(kept)), int64(off), lines})
			continue
		}
		next := nextRecord(data, off+1)
		bad = append(bad, span{off, next, err})
		off = next
	}
	sg.size, sg.lines = int64(len(kept)), lines
	if len(bad) == 0 {
		return bs, nil
	}
	for _, b := range bad {
		if int64(b.to) <= sent {
			continue
		}
		if err := s.quarantineSpan(path, data[b.from:b.to], int64(b.from), b.why); err != nil {
			return nil, err
		}
	}
	if err := s.rewrite(path, kept); err != nil {
		return nil, err
	}
	return bs, nil
}

// span is a corrupt stretch of a segment.
type span struct {
	from, to int
	why      error
}

// nextRecord returns the offset of the first record header at or after
// from (at the start of a line) whose record checks out; len(data) when
// there is none.
func nextRecord(data []byte, from int) int {
	for from < len(data) {
		i := bytes.Index(data[from:], []byte("\n"+magic))
		if i < 0 {
			return len(data)
		}
		at := from + i + 1
		if _, err := readRecord(bufio.NewReader(bytes.NewReader(data[at:]))); err == nil {
			return at
		}
		from = at
	}
	return len(data)
}

// quarantineSpan moves one corrupt stretch of a segment to the quarantine
// directory and counts the points it held as quarantined. The caller holds
// s.mu, or has the spool to itself (recovery).
func (s *Spool) quarantineSpan(path string, bad []byte, off int64, why error) error {
	note := fmt.Sprintf("# tpsmon spool recovery %s: %d bytes at offset %d of %s: %v\n",
		time.Now().UTC().Format(time.RFC3339), len(bad), off, filepath.Base(path), why)
	if err := s.writeQuarantine(filepath.Base(path)+".corrupt", []byte(note), bad); err != nil {
		return err
	}
	points := countPoints(bad)
	s.quarBytes += int64(len(bad))
	s.quarantined += uint64(points)
	s.opts.Log.Warn("spool: corrupt record quarantined", "segment", filepath.Base(path), "offset", off,
		"quarantined_bytes", len(bad), "points", points, "reason", why.Error(),
		"quarantine", filepath.Join(s.opts.Dir, quarDir))
	return nil
}

// rewrite replaces a segment by the records kept.
func (s *Spool) rewrite(path string, kept []byte) error {
	if err := replaceFile(s.opts.FS, path, kept, true); err != nil {
		return fmt.Errorf("spool: rewriting %s: %w", filepath.Base(path), err)
	}
	return nil
}

// writeQuarantine appends note and data to the quarantine file name,
// within the quarantine's bound; data that alone is more than the bound
// is counted as dropped instead.
func (s *Spool) writeQuarantine(name string, note, data []byte) error {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	buf := append(append([]byte{}, note...), data...)
	if len(data) > 0 && data[len(data)-1] != '\n' {
		buf = append(buf, '\n')
	}
	fits, err := s.makeRoomLocked(name, int64(len(buf)))
	if err != nil {
		return err
	}
	if !fits {
		points := countPoints(data)
		s.quarDroppedPoints += uint64(points)
		s.quarDroppedBytes += int64(len(buf))
		s.opts.Log.Warn("spool: quarantine too small for the points refused: not kept", "file", name, "points", points,
			"bytes", len(buf), "quarantine_max_bytes", s.opts.QuarantineMaxBytes)
		return nil
	}
	path, err := statefile.Join(filepath.Join(s.opts.Dir, quarDir), name)
	if err != nil {
		return fmt.Errorf("spool quarantine: %w", err)
	}
	f, err := s.opts.FS.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("spool quarantine: %w", err)
	}
	defer f.Close()
	qf := s.quar[name]
	if qf == nil {
		qf = &quarFile{}
		s.quar[name] = qf
	}
	if fi, err := f.Stat(); err == nil {
		qf.size = fi.Size() // someone else may have changed it
	}
	qf.written = time.Now()
	w, err := f.Write(buf)
	qf.size += int64(w)
	if err != nil {
		return fmt.Errorf("spool quarantine: %w", err)
	}
	return f.Sync()
}

// Quarantine moves points the server rejected aside, with its reason.
func (s *Spool) Quarantine(reason string, lines []byte) error {
	n := bytes.Count(lines, []byte("\n"))
	reason = strings.ToValidUTF8(strings.ReplaceAll(reason, "\n", " "), "\uFFFD")
	if len(reason) > maxNote {
		reason = strings.ToValidUTF8(reason[:maxNote], "") + "…"
	}
	note := fmt.Sprintf("# %s rejected %d points: %s\n", time.Now().UTC().Format(time.RFC3339), n, reason)
	err := s.writeQuarantine(rejectedName, []byte(note), lines)
	s.mu.Lock()
	s.quarantined += uint64(n)
	s.mu.Unlock()
	return err
}

func (s *Spool) readCursor() (uint64, int64) {
	b, err := statefile.ReadRecord(s.cursor.Path)
	if err != nil {
		return 0, 0
	}
	var seq uint64
	var off int64
	if _, err := fmt.Sscanf(string(b), "%d %d", &seq, &off); err != nil {
		return 0, 0
	}
	return seq, off
}

// saveCursor writes the cursor after every delivery, in place (a
// statefile.Record: a torn write leaves the one before), without an
// fsync: after a power loss an older cursor, or none, only makes the
// spool resend records InfluxDB already has, which overwrite themselves
// with the same values (docs/design.md §2). It is written outside the
// spool's FS, which tests use to fail segment writes.
func (s *Spool) saveCursor() error {
	var seq uint64
	if len(s.segs) > 0 {
		seq = s.segs[0].seq
	}
	cursor := fmt.Appendf(nil, "%d %d\n", seq, s.off)
	if err := s.cursor.Write(cursor); err != nil {
		return fmt.Errorf("spool cursor: %w", err)
	}
	return nil
}

// roll starts a new segment.
func (s *Spool) roll() error {
	var seq uint64 = 1
	if n := len(s.segs); n > 0 {
		seq = s.segs[n-1].seq + 1
	}
	f, err := s.opts.FS.OpenFile(s.segPath(seq), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("spool: new segment: %w", err)
	}
	if s.active != nil {
		s.active.Close()
	}
	s.active = f
	s.segs = append(s.segs, &segment{seq: seq})
	if len(s.segs) == 1 {
		s.off, s.ackedLines = 0, 0
	}
	return nil
}

// Append writes whole line protocol lines as one record and syncs it.
// Points that cannot be stored are counted as dropped and the error wraps
// ErrAppend.
func (s *Spool) Append(lines []byte) error {
	n := bytes.Count(lines, []byte("\n"))
	if n == 0 {
		return nil
	}
	rec := appendRecord(nil, lines, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(len(rec)) > s.opts.MaxBytes {
		s.dropLocked(uint64(n), "a single batch is larger than the spool")
		return fmt.Errorf("%w: %d bytes exceed spool.max_bytes %d", ErrAppend, len(rec), s.opts.MaxBytes)
	}
	if last := s.segs[len(s.segs)-1]; last.size >= s.opts.SegmentBytes {
		if err := s.roll(); err != nil {
			s.appendFailedLocked(n)
			return fmt.Errorf("%w: %w", ErrAppend, err)
		}
	}
	for s.pendingBytesLocked()+int64(len(rec)) > s.opts.MaxBytes && len(s.segs) > 0 {
		if len(s.segs) == 1 {
			if err := s.roll(); err != nil {
				s.appendFailedLocked(n)
				return fmt.Errorf("%w: %w", ErrAppend, err)
			}
		}
		s.dropOldestLocked()
	}
	last := s.segs[len(s.segs)-1]
	w, err := s.active.Write(rec)
	if err == nil {
		err = s.active.Sync()
	}
	if err != nil {
		if w > 0 {
			// Cut the partial record so the segment stays readable; if even
			// that fails, recovery will find and quarantine it.
			if terr := s.active.Truncate(last.size); terr != nil {
				s.roll()
			}
		}
		s.appendFailedLocked(n)
		return fmt.Errorf("%w: %w", ErrAppend, err)
	}
	last.size += int64(len(rec))
	last.lines += n
	if s.dropping && s.pendingBytesLocked() < s.opts.MaxBytes*9/10 {
		s.dropping = false
		s.opts.Log.Info("spool: storing points again", "dropped_in_episode", s.dropped-s.episodeStart,
			"dropped_total", s.dropped)
	}
	return nil
}

func (s *Spool) appendFailedLocked(n int) {
	s.appendErrors++
	s.dropLocked(uint64(n), "the spool cannot be written")
}

func (s *Spool) dropLocked(n uint64, why string) {
	if !s.dropping {
		s.episodeStart = s.dropped
	}
	s.dropped += n
	if !s.dropping {
		s.dropping = true
		s.opts.Log.Error("spool: dropping points", "reason", why, "dir", s.opts.Dir,
			"max_bytes", s.opts.MaxBytes, "dropped_total", s.dropped)
	}
}

// dropOldestLocked discards the oldest segment with its unsent points.
func (s *Spool) dropOldestLocked() {
	head := s.segs[0]
	s.dropLocked(uint64(head.lines-s.ackedLines), "spool full: oldest segment discarded")
	s.opts.FS.Remove(s.segPath(head.seq))
	s.segs = s.segs[1:]
	s.off, s.ackedLines = 0, 0
	s.saveCursor()
}

// Batch is a run of whole records read from the spool.
type Batch struct {
	Lines  []byte
	Points int
	seq    uint64
	from   int64
	to     int64
}

// Peek returns the oldest unsent records, up to about maxBytes (at least
// one record), without removing them; ok is false when nothing is unsent.
func (s *Spool) Peek(maxBytes int) (Batch, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		b, skipped, err := s.peekLocked(maxBytes)
		if !skipped {
			return b, b.Points > 0, err
		}
		// A corrupt record was moved aside: read on from the next one.
	}
}

// peekLocked reads the oldest unsent records; skipped says it met a
// corrupt record first, quarantined it and moved the cursor past it.
func (s *Spool) peekLocked(maxBytes int) (b Batch, skipped bool, err error) {
	for {
		if len(s.segs) == 0 {
			return Batch{}, false, nil
		}
		head := s.segs[0]
		if s.off < head.size {
			break
		}
		if len(s.segs) == 1 {
			return Batch{}, false, nil // all sent; the active segment stays
		}
		s.opts.FS.Remove(s.segPath(head.seq))
		s.segs = s.segs[1:]
		s.off, s.ackedLines = 0, 0
		if err := s.saveCursor(); err != nil {
			return Batch{}, false, err
		}
	}
	head := s.segs[0]
	f, err := openNoFollow(s.segPath(head.seq))
	if err != nil {
		return Batch{}, false, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(s.off, io.SeekStart); err != nil {
		return Batch{}, false, fmt.Errorf("spool: %w", err)
	}
	r := bufio.NewReader(io.LimitReader(f, head.size-s.off))
	b = Batch{seq: head.seq, from: s.off, to: s.off}
	for b.to < head.size && (len(b.Lines) == 0 || len(b.Lines) < maxBytes) {
		rec, err := readRecord(r)
		if err == nil {
			b.Lines = append(b.Lines, rec.payload...)
			b.Points += rec.lines
			b.to += rec.size
			continue
		}
		if len(b.Lines) > 0 {
			break // send what is good; the damage is dealt with next
		}
		// Damaged after it was written: that record goes to quarantine,
		// the next one that checks out is read.
		if err := s.skipCorruptLocked(f, head, err); err != nil {
			return Batch{}, false, err
		}
		return Batch{}, true, nil
	}
	return b, false, nil
}

// skipCorruptLocked quarantines the corrupt stretch at s.off of the head
// segment and moves the cursor past it.
func (s *Spool) skipCorruptLocked(f File, head *segment, why error) error {
	if _, err := f.Seek(s.off, io.SeekStart); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	rest := make([]byte, head.size-s.off)
	if _, err := io.ReadFull(f, rest); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	next := nextRecord(rest, 1)
	if err := s.quarantineSpan(s.segPath(head.seq), rest[:next], s.off, why); err != nil {
		return err
	}
	s.off += int64(next)
	s.ackedLines += min(countPoints(rest[:next]), head.lines-s.ackedLines)
	return s.saveCursor()
}

// Ack removes a delivered batch from the spool.
func (s *Spool) Ack(b Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.segs) == 0 || s.segs[0].seq != b.seq || s.off != b.from {
		return nil // its segment was dropped while the batch was out
	}
	s.off = b.to
	s.ackedLines += b.Points
	return s.saveCursor()
}

// Stats is the spool's state for self-telemetry.
type Stats struct {
	Bytes            int64     `json:"bytes"`                  // unsent bytes
	Points           int       `json:"points"`                 // unsent points
	Dropped          uint64    `json:"dropped_points"`         // points lost to a full spool or a failed append
	Quarantined      uint64    `json:"quarantined_points"`     // points rejected or corrupt, kept aside
	QuarantinedBytes int64     `json:"quarantined_bytes"`      // corrupt bytes moved aside
	AppendErrors     uint64    `json:"append_errors"`          // appends that failed
	Dropping         bool      `json:"dropping"`               // points are being dropped now (full or unwritable)
	OldestUnsent     time.Time `json:"oldest_unsent,omitzero"` // timestamp of the oldest unsent point; zero when none

	// The quarantine directory's size, and what its bound made go.
	QuarantineBytes         int64  `json:"quarantine_bytes"`
	QuarantineDroppedPoints uint64 `json:"quarantine_dropped_points"`
	QuarantineDroppedBytes  int64  `json:"quarantine_dropped_bytes"`
}

// Stats returns the spool's counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Bytes: s.pendingBytesLocked(), Points: s.pendingLinesLocked(), Dropped: s.dropped,
		Quarantined: s.quarantined, QuarantinedBytes: s.quarBytes, AppendErrors: s.appendErrors, Dropping: s.dropping}
	s.qmu.Lock()
	st.QuarantineBytes, st.QuarantineDroppedPoints, st.QuarantineDroppedBytes = s.quarTotalLocked(), s.quarDroppedPoints, s.quarDroppedBytes
	s.qmu.Unlock()
	if st.Points > 0 {
		st.OldestUnsent = s.oldestLocked()
	}
	return st
}

// oldestLocked reads the timestamp (ms) of the first unsent line.
func (s *Spool) oldestLocked() time.Time {
	for _, sg := range s.segs {
		off := int64(0)
		if sg == s.segs[0] {
			off = s.off
		}
		if off >= sg.size {
			continue
		}
		f, err := os.Open(s.segPath(sg.seq))
		if err != nil {
			return time.Time{}
		}
		f.Seek(off, io.SeekStart)
		rec, err := readRecord(bufio.NewReader(f))
		f.Close()
		if err != nil {
			return time.Time{}
		}
		line, _, _ := bytes.Cut(rec.payload, []byte("\n"))
		if i := bytes.LastIndexByte(line, ' '); i >= 0 {
			if ms, err := strconv.ParseInt(string(line[i+1:]), 10, 64); err == nil {
				return time.UnixMilli(ms)
			}
		}
		return time.Time{}
	}
	return time.Time{}
}

func (s *Spool) pendingBytesLocked() int64 {
	var n int64
	for _, sg := range s.segs {
		n += sg.size
	}
	return n - s.off
}

func (s *Spool) pendingLinesLocked() int {
	n := 0
	for _, sg := range s.segs {
		n += sg.lines
	}
	return n - s.ackedLines
}

// Close closes the active segment.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		return nil
	}
	err := s.active.Close()
	s.active = nil
	return err
}
