package spool

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
)

// A segment is a sequence of records. Each record is one header line,
//
//	#tpsmon1 <payload bytes> <lines> <crc32c of payload, hex>
//
// followed by the payload: whole line protocol lines. The header is a line
// protocol comment, so a segment stays readable with cat and can even be
// fed to InfluxDB by hand; the length and checksum make a torn or
// corrupted tail after a crash detectable exactly, which bare line
// protocol text is not (a random byte can still look like a point).
const magic = "#tpsmon1 "

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxRecord bounds a record so a corrupted length cannot make recovery
// allocate gigabytes.
const maxRecord = 256 << 20

// errCorrupt marks a record that fails its checks.
var errCorrupt = errors.New("corrupt record")

func appendRecord(dst, payload []byte, lines int) []byte {
	dst = append(dst, magic...)
	dst = strconv.AppendInt(dst, int64(len(payload)), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(lines), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendUint(dst, uint64(crc32.Checksum(payload, castagnoli)), 16)
	dst = append(dst, '\n')
	return append(dst, payload...)
}

// record is one decoded record.
type record struct {
	payload []byte
	lines   int
	size    int64 // header + payload
}

// readRecord reads the record at r's position. io.EOF means a clean end;
// errCorrupt (wrapped) a torn or damaged record.
func readRecord(r *bufio.Reader) (record, error) {
	header, err := r.ReadSlice('\n')
	if err == io.EOF && len(header) == 0 {
		return record{}, io.EOF
	}
	if err != nil {
		return record{}, fmt.Errorf("%w: torn header", errCorrupt)
	}
	if !bytes.HasPrefix(header, []byte(magic)) {
		return record{}, fmt.Errorf("%w: no record header", errCorrupt)
	}
	f := bytes.Fields(header[len(magic):])
	if len(f) != 3 {
		return record{}, fmt.Errorf("%w: bad header", errCorrupt)
	}
	n, err1 := strconv.ParseInt(string(f[0]), 10, 64)
	lines, err2 := strconv.Atoi(string(f[1]))
	sum, err3 := strconv.ParseUint(string(f[2]), 16, 32)
	if err1 != nil || err2 != nil || err3 != nil || n < 0 || n > maxRecord || lines < 0 {
		return record{}, fmt.Errorf("%w: bad header", errCorrupt)
	}
	hlen := int64(len(header))
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return record{}, fmt.Errorf("%w: torn payload", errCorrupt)
	}
	if crc32.Checksum(payload, castagnoli) != uint32(sum) {
		return record{}, fmt.Errorf("%w: checksum mismatch", errCorrupt)
	}
	return record{payload: payload, lines: lines, size: hlen + n}, nil
}
