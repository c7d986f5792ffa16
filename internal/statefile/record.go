package statefile

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"syscall"
)

// Record is a small state file rewritten every window (a log's position,
// the window marker, the spool's cursor) in place rather than replaced: creating a temporary
// file and renaming it over the old one cost more of the steady daemon's
// CPU than anything it writes (bench S1). The file holds two slots, each
// a header (sequence, length, CRC-32C) and the data; a write overwrites
// the older slot, so a write torn by a power loss leaves the other one,
// and a reader (ReadRecord) takes the newest whole slot: the old or the
// new data, as a rename gives.
//
// Data longer than a slot, and the first write of a Record (the file may
// hold an older tpsmon's plain data, or nothing), replace the whole file
// as WriteAtomic does. A Record is used by one goroutine.
type Record struct {
	Path string
	// Durable syncs each write: after a power loss the file holds the
	// last write, not an older one.
	Durable bool
	seq     uint64 // the newest slot's; 0 until this Record wrote
}

// recordSlot is a slot's size: a page, so the slots share no sector.
const recordSlot = 4096

const recordMagic = "tpsmon-slot "

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrTorn marks a record file with no whole slot.
var ErrTorn = errors.New("no whole record in the file (a torn write)")

// Write stores data as the record's newest value.
func (r *Record) Write(data []byte) error {
	slot := appendSlot(nil, r.seq+1, data)
	switch {
	case len(slot) > recordSlot:
		r.seq = 0
		return write(r.Path, data, r.Durable) // plain, read back whole
	case r.seq == 0:
		if err := write(r.Path, slot, r.Durable); err != nil {
			return err
		}
		r.seq = 1
		return nil
	}
	// Sequence 1 is in the first slot, 2 in the second, 3 in the first...
	if err := writeInPlace(r.Path, slot, int64(r.seq%2)*recordSlot, r.Durable); err != nil {
		r.seq = 0 // the next write replaces the file
		return err
	}
	r.seq++
	return nil
}

// writeInPlace writes b at off in the file path, and syncs it where
// durable. It goes by system calls, not an os.File: a File's making
// (its flags read, the poller asked to take it, a cleanup registered) cost
// more than the write, every window (bench S1). Non-blocking, so that a
// FIFO planted in the file's place is an error, not a loop that waits
// for a reader for ever; a link is refused. The sync is fdatasync: the
// slot's bytes and the size that reaches them, not the file's times,
// whose journal commit fsync also waited for (BenchmarkRecordDurable:
// 43 against 38 µs of CPU a write).
func writeInPlace(path string, b []byte, off int64, durable bool) error {
	fd, err := openFD(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return err
	}
	n, werr := syscall.Pwrite(fd, b, off)
	if werr == nil && n < len(b) {
		werr = io.ErrShortWrite
	}
	var serr error
	if durable && werr == nil {
		serr = syscall.Fdatasync(fd)
	}
	cerr := syscall.Close(fd)
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// appendSlot appends a slot holding data with sequence seq to b.
func appendSlot(b []byte, seq uint64, data []byte) []byte {
	b = append(b, recordMagic...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(len(data)), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(crc32.Checksum(data, castagnoli)), 16)
	b = append(b, '\n')
	return append(b, data...)
}

// parseSlot returns the data of the whole slot at the start of b.
func parseSlot(b []byte) (seq uint64, data []byte, ok bool) {
	rest, found := bytes.CutPrefix(b, []byte(recordMagic))
	if !found {
		return 0, nil, false
	}
	head, rest, found := bytes.Cut(rest, []byte{'\n'})
	if !found {
		return 0, nil, false
	}
	f := bytes.Fields(head)
	if len(f) != 3 {
		return 0, nil, false
	}
	seq, err1 := strconv.ParseUint(string(f[0]), 10, 64)
	n, err2 := strconv.ParseUint(string(f[1]), 10, 32)
	sum, err3 := strconv.ParseUint(string(f[2]), 16, 32)
	if err1 != nil || err2 != nil || err3 != nil || n > uint64(len(rest)) {
		return 0, nil, false
	}
	data = rest[:n]
	if crc32.Checksum(data, castagnoli) != uint32(sum) {
		return 0, nil, false
	}
	return seq, data, true
}

// ReadRecord reads what a Record wrote last: the newest whole slot, or the
// whole file where it holds no slot (plain data, as WriteAtomic writes it).
// A file with slots but none whole is ErrTorn.
func ReadRecord(path string) ([]byte, error) {
	b, err := Read(path)
	if err != nil {
		return nil, err
	}
	var newest []byte
	var newestSeq uint64
	slots, whole := false, false
	for off := 0; off < len(b) && off <= recordSlot; off += recordSlot {
		end := min(len(b), off+recordSlot)
		if bytes.HasPrefix(b[off:end], []byte(recordMagic)) {
			slots = true
		}
		if seq, data, ok := parseSlot(b[off:end]); ok && (!whole || seq > newestSeq) {
			newest, newestSeq, whole = data, seq, true
		}
	}
	switch {
	case whole:
		return newest, nil
	case slots:
		return nil, fmt.Errorf("%s: %w", path, ErrTorn)
	}
	return b, nil
}
