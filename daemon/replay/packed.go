package replay

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// packed holds a log's intervals, in the order they were added, as
// variable-length records in byte chunks. Replay must hold a whole log's
// intervals before it joins them (a window can only be closed once no
// interval still to come reaches back into it, which the last line may
// decide), and at 120 bytes each in the Go heap the fresh memory cost
// more than parsing the lines: about a third of the CPU time, most of it
// page faults. Past a log's first 256 KiB its chunks are mapped memory the
// kernel may back with huge pages (mapChunk): a fault per 2 MiB, not per
// 4 KiB. A record is about 23 bytes for a vLLM stat line and 33 for a
// llama.cpp request (8 more where it says how long its slot held it:
// 39.5 to 43.5 bytes a record on the sweep recording's log),
// pointer-free (the GC does not scan it), and reads back exactly, time
// zones included.
//
// A record: a flags byte; the end as seconds since the previous record's
// end (zigzag varint), its nanoseconds and its zone (an index into locs);
// the start, unless it equals the end, as seconds before the end, its
// nanoseconds and zone; two bytes with a 2-bit kind per value
// (valueKind); then each known value, a whole number as a uvarint, any
// other as its 8 bytes.
type packed struct {
	chunks [][]byte
	// maps are the chunks mapped (mapChunk), not the heap's: release
	// returns them.
	maps      [][]byte
	heapBytes int
	locs      []*time.Location
	locIdx    map[*time.Location]uint64 // index in locs
	n         int
	last      int64 // end of the last record, Unix seconds
	// inOrder says the records were added in the order of their ends.
	inOrder bool
	lastEnd time.Time
}

// Flags of a record.
const (
	pkRequest = 1 << iota
	pkObserved
	pkInstant // start equals end, same zone
	pkHole    // a refused line's stretch (sample.Hole)
	pkLatency // a request's own latencies follow the values (latencies)
	pkTally   // speculation or cache counts follow (tallies)
	// The two bits above are the request's sample.TTFTBasis, or
	// pkFailed (sample.Interval.Failed), which no basis is.
	pkBasisShift = iota
	pkFailed     = 3
)

// Kinds of a value.
const (
	vkUnknown = iota // -1
	vkWhole          // a non-negative whole number below 2^53, as a uvarint
	vkRaw            // the float's 8 bytes
)

// pkChunk is the size of a heap chunk, heapChunks how many bytes of them
// a log takes before its chunks are mapped (mappedChunk); pkMaxRecord is
// the most one record takes.
const (
	pkChunk     = 64 << 10
	heapChunks  = 256 << 10
	pkMaxRecord = 1 + 2*binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 + 2*binary.MaxVarintLen64 + 2 + 8*9 + 2 + 8*6 + 2 + 8*3
)

func (p *packed) len() int { return p.n }

func (p *packed) add(iv sample.Interval) {
	if p.n == 0 {
		p.inOrder = true
	} else if iv.End.Before(p.lastEnd) {
		p.inOrder = false
	}
	p.lastEnd = iv.End
	if len(p.chunks) == 0 || cap(p.chunks[len(p.chunks)-1])-len(p.chunks[len(p.chunks)-1]) < pkMaxRecord {
		p.grow()
	}
	b := p.chunks[len(p.chunks)-1]
	var flags byte
	if iv.Request {
		flags |= pkRequest
	}
	if iv.Observed {
		flags |= pkObserved
	}
	if iv.Hole {
		flags |= pkHole
	}
	instant := iv.Start == iv.End
	if instant {
		flags |= pkInstant
	}
	lat := latencies(&iv)
	hasLat := false
	for _, v := range lat {
		hasLat = hasLat || *v != -1
	}
	if hasLat || iv.Failed {
		basis := byte(iv.TTFTBasis)
		if iv.Failed {
			basis = pkFailed
		}
		flags |= pkLatency | basis<<pkBasisShift
	}
	tal := tallies(&iv)
	hasTal := false
	for _, v := range tal {
		hasTal = hasTal || *v != -1
	}
	if hasTal {
		flags |= pkTally
	}
	b = append(b, flags)
	es := iv.End.Unix()
	b = p.appendStamp(b, es-p.last, iv.End)
	p.last = es
	if !instant {
		// End - Start in seconds may not fit a Duration; seconds do.
		b = p.appendStamp(b, es-iv.Start.Unix(), iv.Start)
	}
	vs := values(&iv)
	b = appendValues(b, vs[:])
	if flags&pkLatency != 0 {
		b = appendValues(b, lat[:])
	}
	if hasTal {
		b = appendValues(b, tal[:])
	}
	p.chunks[len(p.chunks)-1] = b
	p.n++
}

// grow adds a chunk. The first is small, so a short log costs no full
// one; past heapChunks bytes they are mapped.
func (p *packed) grow() {
	if p.heapBytes >= heapChunks {
		if b, ok := mapChunk(); ok {
			p.chunks = append(p.chunks, b[:0])
			p.maps = append(p.maps, b)
			return
		}
	}
	size := pkChunk
	if len(p.chunks) == 0 {
		size = 4 * pkMaxRecord
	} else if c := cap(p.chunks[len(p.chunks)-1]); c < pkChunk {
		size = min(pkChunk, 4*c)
	}
	p.chunks = append(p.chunks, make([]byte, 0, size))
	p.heapBytes += size
}

// release returns the mapped chunks; p is empty after it. Mapped memory
// is not the garbage collector's: whoever holds a packed log releases it
// once read.
func (p *packed) release() {
	for _, b := range p.maps {
		unmapChunk(b)
	}
	*p = packed{}
}

// appendStamp appends a time: secs, its seconds relative to some base
// (zigzag varint), then its nanoseconds and its zone's index.
func (p *packed) appendStamp(b []byte, secs int64, t time.Time) []byte {
	b = binary.AppendVarint(b, secs)
	b = binary.AppendUvarint(b, uint64(t.Nanosecond()))
	return binary.AppendUvarint(b, p.loc(t.Location()))
}

// stamp reads what appendStamp wrote, and returns the rest of b.
func (p *packed) stamp(b []byte) (secs, ns int64, loc *time.Location, rest []byte) {
	secs, n := binary.Varint(b)
	b = b[n:]
	u, n := binary.Uvarint(b)
	b = b[n:]
	li, n := binary.Uvarint(b)
	return secs, int64(u), p.locs[li], b[n:]
}

// appendValues appends two bytes of 2-bit kinds, then each known value
// (at most 8).
func appendValues(b []byte, vs []*float64) []byte {
	// The kinds' two bytes come first, filled in once the values are.
	b = append(b, 0, 0)
	at := len(b) - 2
	var kinds uint16
	for i, v := range vs {
		k := valueKind(*v)
		kinds |= uint16(k) << (2 * i)
		switch k {
		case vkWhole:
			b = binary.AppendUvarint(b, uint64(*v))
		case vkRaw:
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(*v))
		}
	}
	binary.LittleEndian.PutUint16(b[at:], kinds)
	return b
}

// readValues reads what appendValues wrote into vs, and returns the rest.
func readValues(b []byte, vs []*float64) []byte {
	kinds := binary.LittleEndian.Uint16(b)
	b = b[2:]
	for i, v := range vs {
		switch kinds >> (2 * i) & 3 {
		case vkUnknown:
			*v = -1
		case vkWhole:
			u, n := binary.Uvarint(b)
			b = b[n:]
			*v = float64(u)
		case vkRaw:
			*v = math.Float64frombits(binary.LittleEndian.Uint64(b))
			b = b[8:]
		}
	}
	return b
}

// latencies are a request's own latencies and how long its server held
// it (Held), which only request records carry (pkLatency).
func latencies(iv *sample.Interval) [6]*float64 {
	return [6]*float64{&iv.TTFT, &iv.TPOT, &iv.E2E, &iv.Queue, &iv.Output, &iv.Held}
}

// tallies are a speculation tally's or a cache reuse's counts, which only
// their own records carry (pkTally).
func tallies(iv *sample.Interval) [3]*float64 {
	return [3]*float64{&iv.SpecDrafted, &iv.SpecAccepted, &iv.PromptCached}
}

// values are an interval's numbers, in the order a record holds them.
func values(iv *sample.Interval) [8]*float64 {
	return [8]*float64{&iv.Tokens, &iv.PromptTokens, &iv.UserTokens, &iv.UserSeconds,
		&iv.Running, &iv.Waiting, &iv.KV, &iv.Preemptions}
}

func valueKind(v float64) int {
	switch {
	case v == -1:
		return vkUnknown
	case v >= 0 && v < 1<<53 && v == float64(uint64(v)) && !math.Signbit(v): // a whole number: exact both ways
		return vkWhole
	}
	return vkRaw
}

// loc is the index of a time zone in p.locs, added if new. A log has one
// or two, but a parser could make a zone per line (a fixed offset).
func (p *packed) loc(l *time.Location) uint64 {
	if n := len(p.locs); n > 0 && p.locs[n-1] == l {
		return uint64(n - 1)
	}
	i, ok := p.locIdx[l]
	if !ok {
		if p.locIdx == nil {
			p.locIdx = map[*time.Location]uint64{}
		}
		i = uint64(len(p.locs))
		p.locs = append(p.locs, l)
		p.locIdx[l] = i
	}
	return i
}

// sortByEnd puts the records in the order of their ends, stably. A log's
// nearly always are: then it costs nothing.
func (p *packed) sortByEnd() {
	if p.inOrder || p.n == 0 {
		return
	}
	all := make([]sample.Interval, 0, p.n)
	for r := p.reader(); r.more(); {
		all = append(all, *r.next())
	}
	slices.SortStableFunc(all, func(a, b sample.Interval) int { return a.End.Compare(b.End) })
	locs, locIdx := p.locs, p.locIdx
	p.release()
	*p = packed{locs: locs, locIdx: locIdx}
	for _, iv := range all {
		p.add(iv)
	}
}

// pkReader reads a packed log's records in order. It is a value: a copy
// reads on from where the original was, independently.
type pkReader struct {
	p     *packed
	chunk int
	off   int
	left  int
	last  int64 // end of the record before, Unix seconds
	// cur is the next record, decoded once peeked; to is where the record
	// after it begins.
	cur    sample.Interval
	peeked bool
	to     struct {
		chunk, off int
		last       int64
	}
}

func (p *packed) reader() pkReader {
	return pkReader{p: p, left: p.n}
}

func (r *pkReader) more() bool { return r.left > 0 }

// next is the next record, taken.
func (r *pkReader) next() *sample.Interval {
	iv := r.peek()
	r.taken()
	return iv
}

// taken moves on past the record peek returned.
func (r *pkReader) taken() {
	r.chunk, r.off, r.last = r.to.chunk, r.to.off, r.to.last
	r.left--
	r.peeked = false
}

// peek decodes the next record without taking it; the interval is valid
// until the reader moves on. There must be more.
func (r *pkReader) peek() *sample.Interval {
	iv := &r.cur
	if r.peeked {
		return iv
	}
	chunk, off := r.chunk, r.off
	if off == len(r.p.chunks[chunk]) {
		chunk, off = chunk+1, 0
	}
	b := r.p.chunks[chunk][off:]
	size := len(b)
	flags := b[0]
	b = b[1:]
	d, ns, loc, b := r.p.stamp(b)
	last := r.last + d
	iv.End = time.Unix(last, ns).In(loc)
	if flags&pkInstant != 0 {
		iv.Start = iv.End
	} else {
		back, sns, sloc, rest := r.p.stamp(b)
		b = rest
		iv.Start = time.Unix(last-back, sns).In(sloc)
	}
	iv.Request, iv.Observed, iv.Hole = flags&pkRequest != 0, flags&pkObserved != 0, flags&pkHole != 0
	vs := values(iv)
	b = readValues(b, vs[:])
	lat := latencies(iv)
	iv.TTFTBasis, iv.Failed = 0, false
	if flags&pkLatency != 0 {
		b = readValues(b, lat[:])
		if basis := flags >> pkBasisShift & 3; basis == pkFailed {
			iv.Failed = true
		} else {
			iv.TTFTBasis = sample.TTFTBasis(basis)
		}
	} else {
		for _, v := range lat {
			*v = -1
		}
	}
	tal := tallies(iv)
	if flags&pkTally != 0 {
		b = readValues(b, tal[:])
	} else {
		for _, v := range tal {
			*v = -1
		}
	}
	r.to.chunk, r.to.off, r.to.last = chunk, off+size-len(b), last
	r.peeked = true
	return iv
}
