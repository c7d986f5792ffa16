package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// quarOnDisk returns the bytes and points of the quarantine directory, read
// from the disk.
func quarOnDisk(t *testing.T, dir string) (bytes int64, points int) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, quarDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, quarDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		bytes += int64(len(b))
		points += countPoints(b)
	}
	return bytes, points
}

// TestQuarantineBounded is issue 28's growth: points InfluxDB keeps
// refusing went to rejected.lp without end (~30 KB/s for a 70 KB label).
// The quarantine stays within its bound, rotating rejected.lp, and what it
// lets go is counted: on disk and dropped add up to every point and byte
// refused, an old oversized file included.
func TestQuarantineBounded(t *testing.T) {
	const bound = 64 << 10
	big := strings.Repeat("x", 70<<10) // one refusal over the bound
	tests := []struct {
		name     string
		legacy   int // points in a rejected.lp left by a version without the bound
		batches  int
		points   int // per batch
		label    string
		rotated  bool // rejected.lp.1 is there at the end
		minDrops int  // points the bound must have dropped
	}{
		{"many small refusals", 0, 80, 20, "", true, 1},
		{"a refusal over the bound", 0, 3, 1, big, false, 3},
		{"an old oversized rejected.lp", 3000, 5, 2, "", false, 3000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var wantBytes int64
			if tc.legacy > 0 {
				os.MkdirAll(filepath.Join(dir, quarDir), 0o700)
				old := []byte(fmt.Sprintf("# older tpsmon rejected %d points: x\n", tc.legacy) + string(batch(tc.legacy, 0)))
				os.WriteFile(filepath.Join(dir, quarDir, rejectedName), old, 0o600)
				os.Chtimes(filepath.Join(dir, quarDir, rejectedName), time.Now().Add(-time.Hour), time.Now().Add(-time.Hour))
				wantBytes += int64(len(old))
			}
			s, err := Open(Options{Dir: dir, QuarantineMaxBytes: bound})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if st := s.Stats(); st.QuarantineBytes != wantBytes {
				t.Errorf("at open the quarantine holds %d bytes, want %d", st.QuarantineBytes, wantBytes)
			}
			const reason = "HTTP 400: partial write: field type conflict"
			for i := range tc.batches {
				var lines []byte
				for j := range tc.points {
					lines = fmt.Appendf(lines, "tpsmon_server,host=h,model=%s tokens=%di %d\n", tc.label, j, i*1000+j)
				}
				if err := s.Quarantine(reason, lines); err != nil {
					t.Fatal(err)
				}
				// The note: "# <RFC 3339 UTC, 20 bytes> rejected <n> points: <reason>\n".
				wantBytes += int64(len(fmt.Sprintf("# %20s rejected %d points: %s\n", "", tc.points, reason)) + len(lines))
				if b, _ := quarOnDisk(t, dir); b > bound {
					t.Fatalf("after %d refusals the quarantine holds %d bytes, over its bound %d", i+1, b, bound)
				}
			}
			st := s.Stats()
			diskBytes, diskPoints := quarOnDisk(t, dir)
			if st.QuarantineBytes != diskBytes {
				t.Errorf("stats say %d bytes, the disk holds %d", st.QuarantineBytes, diskBytes)
			}
			refused := tc.legacy + tc.batches*tc.points
			if got := diskPoints + int(st.QuarantineDroppedPoints); got != refused {
				t.Errorf("%d points on disk + %d dropped = %d, want the %d refused", diskPoints, st.QuarantineDroppedPoints, got, refused)
			}
			if got := diskBytes + st.QuarantineDroppedBytes; got != wantBytes {
				t.Errorf("%d bytes on disk + %d dropped = %d, want the %d written", diskBytes, st.QuarantineDroppedBytes, got, wantBytes)
			}
			if int(st.QuarantineDroppedPoints) < tc.minDrops {
				t.Errorf("%d points dropped, want at least %d", st.QuarantineDroppedPoints, tc.minDrops)
			}
			if _, err := os.Stat(filepath.Join(dir, quarDir, rotatedName)); (err == nil) != tc.rotated {
				t.Errorf("%s there: %v, want %v", rotatedName, err == nil, tc.rotated)
			}
			if st.Quarantined != uint64(tc.batches*tc.points) {
				t.Errorf("%d points counted quarantined, want %d", st.Quarantined, tc.batches*tc.points)
			}
		})
	}
}

// TestQuarantineNoteBounded: InfluxDB quotes a refused line whole in its
// message; the note keeps 1 KiB of it, on one line.
func TestQuarantineNoteBounded(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(Options{Dir: dir})
	defer s.Close()
	reason := "unable to parse 'm,model=" + strings.Repeat("模", 30<<10) + "\nv=1i 1': max key length exceeded"
	if err := s.Quarantine(reason, []byte("m v=1i 1\n")); err != nil {
		t.Fatal(err)
	}
	q, _ := os.ReadFile(filepath.Join(dir, quarDir, rejectedName))
	note, rest, _ := strings.Cut(string(q), "\n")
	if len(note) > maxNote+100 || !strings.HasPrefix(note, "# ") || rest != "m v=1i 1\n" {
		t.Errorf("note of %d bytes, then %q", len(note), rest)
	}
}

// TestQuarantineFilesRemovedByHand: an operator empties the quarantine
// while tpsmon runs, just before rejected.lp is due to rotate; refusals go
// on being kept, within the bound.
func TestQuarantineFilesRemovedByHand(t *testing.T) {
	const bound = 16 << 10
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, QuarantineMaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	removed := 0
	for i := range 60 {
		b := batch(5, int64(i)*10_000)
		if f := s.quar[rejectedName]; f != nil && f.size+int64(len(b)) > bound/2 {
			// The next refusal rotates it: take it away first, and
			// rejected.lp.1 every other time.
			os.Remove(filepath.Join(dir, quarDir, rejectedName))
			if removed%2 == 1 {
				os.Remove(filepath.Join(dir, quarDir, rotatedName))
			}
			removed++
		}
		if err := s.Quarantine("partial write: field type conflict", b); err != nil {
			t.Fatalf("refusal %d: %v", i, err)
		}
		if b, _ := quarOnDisk(t, dir); b > bound {
			t.Fatalf("after %d refusals %d bytes, over the bound %d", i+1, b, bound)
		}
	}
	if removed < 2 {
		t.Fatalf("removed files %d times: the test did not test", removed)
	}
	if b, p := quarOnDisk(t, dir); p == 0 || b == 0 {
		t.Errorf("the quarantine holds %d bytes, %d points: the last refusals were not kept", b, p)
	}
}
