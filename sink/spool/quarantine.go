package spool

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/tpsmon/tpsmon/internal/statefile"
)

// The quarantine is bounded (Options.QuarantineMaxBytes): points InfluxDB
// keeps refusing would otherwise fill the disk at the rate they come.
// rejected.lp is rotated to rejected.lp.1 when it would pass half the
// bound, and when a write would pass the bound the files written longest
// ago are removed first; what goes is counted in points and bytes. The
// functions named ...Locked here are called with s.qmu held.
const (
	rejectedName = "rejected.lp"
	rotatedName  = rejectedName + ".1"
	// defaultQuarantineMax is Options.QuarantineMaxBytes's default.
	defaultQuarantineMax = 64 << 20
	// maxNote bounds the reason written with rejected points: InfluxDB
	// quotes a refused line whole, which may be 64 KiB.
	maxNote = 1 << 10
)

// quarFile is a file in the quarantine directory, as tpsmon last saw it.
type quarFile struct {
	size    int64
	written time.Time
}

// loadQuarantine takes the sizes of the files already in the quarantine
// directory; their contents are read only if one must go.
func (s *Spool) loadQuarantine() error {
	s.quar = map[string]*quarFile{}
	entries, err := os.ReadDir(filepath.Join(s.opts.Dir, quarDir))
	if err != nil {
		return fmt.Errorf("spool quarantine: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		s.quar[e.Name()] = &quarFile{size: fi.Size(), written: fi.ModTime()}
	}
	return nil
}

func (s *Spool) quarTotalLocked() int64 {
	var n int64
	for _, f := range s.quar {
		n += f.size
	}
	return n
}

// makeRoomLocked frees the room for n more bytes in the file name, within
// the bound; false when n alone is more than the bound.
func (s *Spool) makeRoomLocked(name string, n int64) (bool, error) {
	limit := s.opts.QuarantineMaxBytes
	if n > limit {
		return false, nil
	}
	if f := s.quar[name]; name == rejectedName && f != nil && f.size > 0 && f.size+n > limit/2 {
		if err := s.rotateLocked(); err != nil {
			return false, err
		}
	}
	for s.quarTotalLocked()+n > limit {
		victim := s.oldestQuarLocked(name)
		if victim == "" {
			victim = name // only the file written to is left: it goes too
		}
		if err := s.removeQuarLocked(victim); err != nil {
			return false, err
		}
	}
	return true, nil
}

// rotateLocked renames rejected.lp to rejected.lp.1, whose old contents go.
func (s *Spool) rotateLocked() error {
	if s.quar[rotatedName] != nil {
		if err := s.removeQuarLocked(rotatedName); err != nil {
			return err
		}
	}
	dir := filepath.Join(s.opts.Dir, quarDir)
	err := s.opts.FS.Rename(filepath.Join(dir, rejectedName), filepath.Join(dir, rotatedName))
	if errors.Is(err, fs.ErrNotExist) {
		delete(s.quar, rejectedName) // removed by hand: nothing to rotate
		return nil
	}
	if err != nil {
		return fmt.Errorf("spool quarantine: rotating %s: %w", rejectedName, err)
	}
	s.quar[rotatedName] = s.quar[rejectedName]
	delete(s.quar, rejectedName)
	return nil
}

// oldestQuarLocked names the file written longest ago, but not except;
// "" when there is none.
func (s *Spool) oldestQuarLocked(except string) string {
	names := make([]string, 0, len(s.quar))
	for n := range s.quar {
		if n != except {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(a, b int) bool {
		fa, fb := s.quar[names[a]], s.quar[names[b]]
		if !fa.written.Equal(fb.written) {
			return fa.written.Before(fb.written)
		}
		return names[a] < names[b]
	})
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// removeQuarLocked removes a quarantine file, counting its points and
// bytes as dropped.
func (s *Spool) removeQuarLocked(name string) error {
	path, err := statefile.Join(filepath.Join(s.opts.Dir, quarDir), name)
	if err != nil {
		return fmt.Errorf("spool quarantine: %w", err)
	}
	points, err := countPointsIn(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool quarantine: %w", err)
	}
	if err := s.opts.FS.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool quarantine: %w", err)
	}
	size := s.quar[name].size
	delete(s.quar, name)
	s.quarDroppedPoints += uint64(points)
	s.quarDroppedBytes += size
	s.opts.Log.Warn("spool: quarantine full: file removed", "file", name, "points", points, "bytes", size,
		"quarantine_max_bytes", s.opts.QuarantineMaxBytes, "dropped_points_total", s.quarDroppedPoints)
	return nil
}

// countPointsIn counts the points in a file as countPoints does, a piece
// at a time: a rotated quarantine file may be large.
func countPointsIn(path string) (int, error) {
	f, err := openNoFollow(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var c pointCounter
	if _, err := io.Copy(&c, f); err != nil {
		return 0, err
	}
	return c.n, nil
}

// countPoints counts the line protocol lines in b: lines that are neither
// blank nor comments (record headers and notes are comments).
func countPoints(b []byte) int {
	var c pointCounter
	c.Write(b)
	return c.n
}

// pointCounter counts the points written to it, line by line.
type pointCounter struct {
	n       int
	decided bool // the current line was told a point or not
}

func (c *pointCounter) Write(b []byte) (int, error) {
	for _, ch := range b {
		switch {
		case ch == '\n':
			c.decided = false
		case c.decided, ch == ' ', ch == '\t', ch == '\r':
		default:
			if ch != '#' {
				c.n++
			}
			c.decided = true
		}
	}
	return len(b), nil
}
