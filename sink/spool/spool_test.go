package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/tpsmon/tpsmon/internal/statefile"
)

// batch returns n line protocol lines with timestamps from ts (ms).
func batch(n int, ts int64) []byte {
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "tpsmon_server,host=h,server=s tokens=%di,system_tps=%d.5 %d\n", i, i, ts+int64(i)*1000)
	}
	return b.Bytes()
}

// appendBatches appends n batches of lines lines each, the i-th from
// i*step ms, and returns what it appended.
func appendBatches(t *testing.T, s *Spool, n, lines int, step int64) []byte {
	t.Helper()
	var all []byte
	for i := range n {
		b := batch(lines, int64(i)*step)
		all = append(all, b...)
		if err := s.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// drain peeks and acks until the spool is empty, returning what it read.
func drain(t *testing.T, s *Spool, maxBytes int) []byte {
	t.Helper()
	var all []byte
	for {
		b, ok, err := s.Peek(maxBytes)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return all
		}
		all = append(all, b.Lines...)
		if err := s.Ack(b); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAppendPeekAckInOrder(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), MaxBytes: 1 << 20, SegmentBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	want := appendBatches(t, s, 20, 5, 100_000)
	st := s.Stats()
	if st.Points != 100 || st.OldestUnsent.UnixMilli() != 0 {
		t.Errorf("stats before drain: %+v", st)
	}
	if got := drain(t, s, 700); !bytes.Equal(got, want) {
		t.Errorf("drained %d bytes, want the %d appended, in order", len(got), len(want))
	}
	if st := s.Stats(); st.Points != 0 || st.Bytes != 0 {
		t.Errorf("stats after drain: %+v", st)
	}
	segs, _ := filepath.Glob(filepath.Join(s.opts.Dir, "*"+segSuffix))
	if len(segs) != 1 {
		t.Errorf("%d segments left after a full drain, want the active one", len(segs))
	}
}

func TestRestartResumesAtCursor(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, SegmentBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		s.Append(batch(3, int64(i)*10_000))
	}
	// Send and ack the first 4 batches, then "crash": no Close.
	for range 4 {
		b, _, _ := s.Peek(1)
		s.Ack(b)
	}
	unacked, _, _ := s.Peek(1) // out for sending when the process died
	_ = unacked

	s2, err := Open(Options{Dir: dir, SegmentBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	if st := s2.Stats(); st.Points != 18 {
		t.Errorf("after restart %d points unsent, want 18", st.Points)
	}
	var want []byte
	for i := 4; i < 10; i++ {
		want = append(want, batch(3, int64(i)*10_000)...)
	}
	if got := drain(t, s2, 1); !bytes.Equal(got, want) {
		t.Errorf("after restart got\n%s\nwant\n%s", got, want)
	}
}

func TestRecoveryQuarantinesCorruptTail(t *testing.T) {
	tests := []struct {
		name   string
		damage func(path string, size int64)
	}{
		{"truncated record", func(p string, size int64) { os.Truncate(p, size-7) }},
		{"truncated record, a crashed rewrite's file left", func(p string, size int64) {
			os.Truncate(p, size-7)
			os.WriteFile(p+".tmp", []byte("half a rewrite"), 0o600)
		}},
		{"random bytes appended", func(p string, size int64) {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte("\x00\xff garbage \x13\x37 not a record"))
			f.Close()
		}},
		{"bit flip in the last payload", func(p string, size int64) {
			b, _ := os.ReadFile(p)
			b[len(b)-10] ^= 0x20
			os.WriteFile(p, b, 0o600)
		}},
		{"torn header", func(p string, size int64) {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte("#tpsmon1 99"))
			f.Close()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := Open(Options{Dir: dir})
			s.Append(batch(4, 0))
			s.Append(batch(4, 100_000))
			s.Append(batch(4, 200_000))
			s.Close()
			path := s.segPath(1)
			fi, _ := os.Stat(path)
			tt.damage(path, fi.Size())

			s2, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatalf("recovery failed: %v", err)
			}
			st := s2.Stats()
			wantPoints := 12
			if tt.name != "random bytes appended" && tt.name != "torn header" {
				wantPoints = 8 // the damaged third record is gone
			}
			if st.Points != wantPoints || st.QuarantinedBytes == 0 {
				t.Errorf("after recovery: %+v, want %d points and quarantined bytes", st, wantPoints)
			}
			q, err := os.ReadFile(filepath.Join(dir, quarDir, filepath.Base(path)+".corrupt"))
			if err != nil || !strings.Contains(string(q), "spool recovery") {
				t.Errorf("quarantine file: %v %q", err, q)
			}
			// The spool goes on: new points append after the good prefix.
			s2.Append(batch(2, 900_000))
			got := drain(t, s2, 1<<20)
			if n := bytes.Count(got, []byte("\n")); n != wantPoints+2 {
				t.Errorf("drained %d lines, want %d", n, wantPoints+2)
			}
		})
	}
}

func TestFullSpoolDropsOldestExactly(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), MaxBytes: 4096, SegmentBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	appended := 0
	for i := range 100 {
		if err := s.Append(batch(3, int64(i)*10_000)); err != nil {
			t.Fatal(err)
		}
		appended += 3
	}
	st := s.Stats()
	if st.Bytes > 4096 {
		t.Errorf("spool holds %d bytes, over max_bytes 4096", st.Bytes)
	}
	if st.Dropped == 0 || int(st.Dropped)+st.Points != appended {
		t.Errorf("dropped %d + unsent %d != appended %d", st.Dropped, st.Points, appended)
	}
	got := drain(t, s, 1<<20)
	if n := bytes.Count(got, []byte("\n")); n != st.Points {
		t.Errorf("drained %d, stats said %d unsent", n, st.Points)
	}
	// What is left is the newest data.
	if !bytes.HasSuffix(got, batch(3, 99*10_000)) {
		t.Error("the newest batch was dropped instead of the oldest")
	}
}

// faultyFS fails writes to segment files while full is set.
type faultyFS struct {
	OS
	mu   sync.Mutex
	full bool
}

func (f *faultyFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	file, err := f.OS.OpenFile(name, flag, perm)
	if err != nil || !strings.HasSuffix(name, segSuffix) {
		return file, err
	}
	return &faultyFile{File: file, fs: f}, nil
}

type faultyFile struct {
	File
	fs *faultyFS
}

func (f *faultyFile) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	full := f.fs.full
	f.fs.mu.Unlock()
	if full {
		// A device that fills up mid-record.
		n, _ := f.File.Write(b[:len(b)/2])
		return n, &fs.PathError{Op: "write", Path: "segment", Err: syscall.ENOSPC}
	}
	return f.File.Write(b)
}

func TestDiskFullCountsAndRecovers(t *testing.T) {
	ffs := &faultyFS{}
	dir := t.TempDir()
	var logs bytes.Buffer
	s, err := Open(Options{Dir: dir, FS: ffs, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.Append(batch(5, 0))
	ffs.full = true
	for i := 1; i <= 3; i++ {
		err := s.Append(batch(4, int64(i)*100_000))
		if !errors.Is(err, ErrAppend) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("append on a full disk: %v", err)
		}
	}
	if !s.Stats().Dropping {
		t.Error("a full disk is not reported as dropping now")
	}
	ffs.full = false
	s.Append(batch(2, 900_000))
	st := s.Stats()
	if st.Dropped != 12 || st.AppendErrors != 3 || st.Points != 7 || st.Dropping {
		t.Errorf("stats %+v, want 12 dropped, 3 append errors, 7 unsent, not dropping now", st)
	}
	// One line when the episode begins, one with its count when it ends.
	if n := strings.Count(logs.String(), "dropping points"); n != 1 {
		t.Errorf("%d lines for one episode:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), `storing points again" dropped_in_episode=12`) {
		t.Errorf("the end of the episode is not logged with its count:\n%s", logs.String())
	}
	// The partial records were cut: the segment reads back cleanly, also
	// after a restart.
	s.Close()
	s2, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if st := s2.Stats(); st.QuarantinedBytes != 0 || st.Points != 7 {
		t.Errorf("after restart %+v", st)
	}
	want := append(batch(5, 0), batch(2, 900_000)...)
	if got := drain(t, s2, 1<<20); !bytes.Equal(got, want) {
		t.Errorf("got %q", got)
	}
}

func TestQuarantineRejected(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(Options{Dir: dir})
	if err := s.Quarantine("HTTP 400: partial write: field type conflict", []byte("m v=1.5 1\nm v=2.5 2\n")); err != nil {
		t.Fatal(err)
	}
	q, _ := os.ReadFile(filepath.Join(dir, quarDir, "rejected.lp"))
	if !strings.Contains(string(q), "rejected 2 points: HTTP 400: partial write") || !strings.Contains(string(q), "m v=2.5 2\n") {
		t.Errorf("quarantine %q", q)
	}
	if s.Stats().Quarantined != 2 {
		t.Errorf("quarantined %d", s.Stats().Quarantined)
	}
}

func BenchmarkAppendDrain(b *testing.B) {
	// 10 points: one window of a node with 8 GPUs and 2 servers; 1000: a
	// node catching up after an outage.
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("points=%d", n), func(b *testing.B) {
			s, err := Open(Options{Dir: b.TempDir(), MaxBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			lines := batch(n, 1_700_000_000_000)
			b.SetBytes(int64(len(lines)))
			b.ResetTimer()
			for range b.N {
				if err := s.Append(lines); err != nil {
					b.Fatal(err)
				}
				bt, _, err := s.Peek(1 << 20)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Ack(bt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "points/s")
			b.ReportMetric(float64(len(appendRecord(nil, lines, n)))/float64(n), "bytes/point")
		})
	}
}

// TestCorruptRecordLosesOnlyItself flips one byte in record 2 of 12, on
// disk before a restart and under a running spool: that record's points
// are quarantined and counted, the 11 records after and before it are
// delivered.
func TestCorruptRecordLosesOnlyItself(t *testing.T) {
	flip := func(t *testing.T, path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// Record 2's payload: after the first record and its header.
		first := bytes.Index(b[1:], []byte("\n"+magic)) + 2
		hdr := bytes.IndexByte(b[first:], '\n')
		b[first+hdr+5] ^= 0x01
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, restart := range []bool{true, false} {
		name := "running"
		if restart {
			name = "at restart"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			for i := range 12 {
				b := batch(3, int64(i)*100_000)
				s.Append(b)
				if i != 1 {
					want = append(want, b...)
				}
			}
			flip(t, s.segPath(1))
			if restart {
				s.Close()
				if s, err = Open(Options{Dir: dir}); err != nil {
					t.Fatal(err)
				}
			}
			got := drain(t, s, 1<<20)
			if !bytes.Equal(got, want) {
				t.Errorf("delivered %d lines, want the 33 of the 11 good records", bytes.Count(got, []byte("\n")))
			}
			st := s.Stats()
			if st.Quarantined != 3 || st.Points != 0 {
				t.Errorf("stats %+v, want 3 points quarantined and none left", st)
			}
			q, err := os.ReadFile(filepath.Join(dir, quarDir, "0000000000000001.lps.corrupt"))
			if err != nil || bytes.Count(q, []byte("\n")) < 4 {
				t.Errorf("quarantine holds %q (%v), want the damaged record", q, err)
			}
			// The spool goes on after the damage, and a restart does not
			// quarantine it again.
			s.Append(batch(2, 9_000_000))
			s.Close()
			s2, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(drain(t, s2, 1<<20), []byte("\n")); n != 2 {
				t.Errorf("after restart drained %d lines, want 2", n)
			}
			if q := s2.Stats().Quarantined; q != 0 {
				t.Errorf("restart quarantined %d points again", q)
			}
		})
	}
}

// TestStateLinksRefused plants links where the spool writes (the cursor's
// temporary file, the quarantine file): the write fails naming the link,
// the target stays as it was, and a loose pre-existing directory is made
// 0700.
func TestStateLinksRefused(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range []string{dir, filepath.Join(dir, quarDir)} {
		if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", d, fi.Mode().Perm())
		}
	}
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("precious\n"), 0o644)
	for _, name := range []string{cursorName + ".tmp", filepath.Join(quarDir, "rejected.lp")} {
		if err := os.Symlink(victim, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	s.Append(batch(2, 0))
	b, _, err := s.Peek(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ack(b); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, cursorName+".tmp")) {
		t.Errorf("cursor through a link: %v", err)
	}
	if err := s.Quarantine("test", []byte("m v=1 1\n")); err == nil || !strings.Contains(err.Error(), "rejected.lp") {
		t.Errorf("quarantine through a link: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the link's target was written: %q", b)
	}
}

// TestStaleCursorResendsNeverLoses: the cursor is written without an
// fsync, so after a power loss it may be older than the last delivery,
// empty or missing. Each such cursor must make the spool resend from a
// record boundary at or before the true one: delivered records again
// (InfluxDB overwrites them with the same values), never one skipped.
func TestStaleCursorResendsNeverLoses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stale func(t *testing.T, path string, older []byte)
	}{
		{"missing", func(t *testing.T, path string, _ []byte) { os.Remove(path) }},
		{"empty", func(t *testing.T, path string, _ []byte) { os.WriteFile(path, nil, 0o600) }},
		{"zeros", func(t *testing.T, path string, _ []byte) { os.WriteFile(path, make([]byte, 8), 0o600) }},
		{"older, in a segment since removed", func(t *testing.T, path string, older []byte) { os.WriteFile(path, older, 0o600) }},
		{"an offset inside a record", func(t *testing.T, path string, _ []byte) {
			b, _ := statefile.ReadRecord(path)
			var seq, off int64
			fmt.Sscanf(string(b), "%d %d", &seq, &off)
			os.WriteFile(path, fmt.Appendf(nil, "%d %d\n", seq, off-7), 0o600)
		}},
		{"the newest slot torn", func(t *testing.T, path string, _ []byte) {
			// Seven deliveries: the seventh write is in the first slot;
			// the first digit of its data changes, its checksum does not.
			b, err := os.ReadFile(path)
			i := bytes.IndexByte(b, '\n') + 1
			if err != nil || i == 0 || i >= len(b) {
				t.Fatalf("cursor %q: %v", b, err)
			}
			b[i] ^= 1
			os.WriteFile(path, b, 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(Options{Dir: dir, SegmentBytes: 512})
			if err != nil {
				t.Fatal(err)
			}
			all := appendBatches(t, s, 12, 3, 10_000)
			cursor := filepath.Join(dir, cursorName)
			var saved [][]byte // the cursor after each delivery
			var sent []byte
			for range 7 {
				b, _, _ := s.Peek(1)
				sent = append(sent, b.Lines...)
				if err := s.Ack(b); err != nil {
					t.Fatal(err)
				}
				c, err := statefile.ReadRecord(cursor)
				if err != nil {
					t.Fatal(err)
				}
				saved = append(saved, c)
			}
			// older: the last cursor in a segment before the current
			// one, which is removed by now; its offset, at that
			// segment's end, is past the true cursor's.
			var older []byte
			last := strings.Fields(string(saved[len(saved)-1]))[0]
			for _, c := range saved {
				if strings.Fields(string(c))[0] != last {
					older = c
				}
			}
			if older == nil {
				t.Fatal("every delivery was in one segment")
			}
			unsent := all[len(sent):]
			tc.stale(t, cursor, older)

			s2, err := Open(Options{Dir: dir, SegmentBytes: 512})
			if err != nil {
				t.Fatal(err)
			}
			got := drain(t, s2, 1)
			if !bytes.HasSuffix(got, unsent) {
				t.Fatalf("after the restart the spool sent\n%s\nwhich does not end with the %d unsent bytes\n%s", got, len(unsent), unsent)
			}
			if !bytes.HasSuffix(all, got) {
				t.Errorf("after the restart the spool sent\n%s\nwhich is not a tail of what was appended", got)
			}
		})
	}
}

// syncCountFS counts fsyncs by file name.
type syncCountFS struct {
	OS
	mu    sync.Mutex
	syncs map[string]int
}

func (c *syncCountFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := c.OS.OpenFile(name, flag, perm)
	if err != nil {
		return f, err
	}
	return &syncCountFile{File: f, fs: c, name: filepath.Base(name)}, nil
}

type syncCountFile struct {
	File
	fs   *syncCountFS
	name string
}

func (f *syncCountFile) Sync() error {
	f.fs.mu.Lock()
	f.fs.syncs[f.name]++
	f.fs.mu.Unlock()
	return f.File.Sync()
}

// TestAppendIsDurable: every append reaches the disk before it returns
// (an accepted point is never lost). The cursor, written after every
// delivery, is not synced (TestStaleCursorResendsNeverLoses says why that
// is safe).
func TestAppendIsDurable(t *testing.T) {
	cfs := &syncCountFS{syncs: map[string]int{}}
	s, err := Open(Options{Dir: t.TempDir(), FS: cfs})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.Append(batch(2, int64(i)*10_000)); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, s, 1)
	segSyncs := 0
	for name, n := range cfs.syncs {
		if strings.HasSuffix(name, segSuffix) {
			segSyncs += n
		}
	}
	if segSyncs < 5 {
		t.Errorf("%d fsyncs of segments for 5 appends (%v)", segSyncs, cfs.syncs)
	}
}

// TestForeignDirRefused: a spool directory planted by another user, with
// a segment in it, or one every user can write into, is refused: nothing
// in it is taken for delivery, and its owner and mode stay.
func TestForeignDirRefused(t *testing.T) {
	tests := []struct {
		name string
		prep func(t *testing.T, dir string) // after the planted segment
	}{
		{"owned by another user", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give a directory to another user; statefile's tests cover the check as any user")
			}
			for _, p := range []string{dir, filepath.Join(dir, quarDir)} {
				if err := os.Chown(p, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"shared, 1777", func(t *testing.T, dir string) { os.Chmod(dir, 0o777|os.ModeSticky) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "spool")
			planted, err := Open(Options{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			appendBatches(t, planted, 1, 5, 0)
			planted.Close()
			tc.prep(t, dir)
			before, _ := os.Stat(dir)
			s, err := Open(Options{Dir: dir})
			if err == nil {
				t.Errorf("opened; %d planted points would be delivered", s.Stats().Points)
				s.Close()
			} else if !errors.Is(err, statefile.ErrNotOwn) || !strings.Contains(err.Error(), dir) {
				t.Errorf("error %v, want ErrNotOwn naming %s", err, dir)
			}
			after, _ := os.Stat(dir)
			if after.Mode() != before.Mode() || after.Sys().(*syscall.Stat_t).Uid != before.Sys().(*syscall.Stat_t).Uid {
				t.Errorf("directory changed from %v to %v", before.Mode(), after.Mode())
			}
		})
	}
}
