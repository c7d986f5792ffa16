package replay

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Every interval comes back from its record exactly: the same instants in
// the same zones, every float bit for bit.
func TestPackedReadsBackExactly(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	plus := time.FixedZone("", 5*3600+1800)
	at := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	iv := func(start, end time.Time, vals ...float64) sample.Interval {
		v := sample.Unknown(start, end)
		for i, x := range vals {
			*values(&v)[i] = x
		}
		return v
	}
	ivs := []sample.Interval{
		iv(at.Add(-time.Second), at, 1234.5, 17, -1, -1, 3, 0, 0.375, 0),
		iv(at, at, -1, 512),
		iv(at.Add(-5*time.Hour).In(ny), at.Add(123456789).In(plus), 0, math.Copysign(0, -1), math.Inf(1), math.NaN()),
		iv(at.Add(-time.Nanosecond), at.Add(-1), 1<<53, 1<<53+2, 1<<53-1, math.MaxFloat64, math.SmallestNonzeroFloat64, -2, -1e300, 0.1),
		iv(at.In(ny), at, 1), // one instant in two zones is not "start = end"
		iv(time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC), 1e15),
		iv(at.Add(-time.Hour).In(time.Local), at.Add(-30*time.Minute).In(time.Local), 42),
		iv(at.AddDate(-30, 0, 0), at.AddDate(-30, 0, 1), 7), // end far before the previous one
	}
	ivs[0].Request, ivs[1].Observed, ivs[2].Request, ivs[2].Observed, ivs[6].Hole = true, true, true, true, true
	// A speculation tally and a cache reuse: their counts ride apart.
	spec, cached := sample.Unknown(at, at), sample.Unknown(at, at)
	spec.SpecDrafted, spec.SpecAccepted, cached.PromptCached = 1572, 489, 0.5
	ivs = append(ivs, spec, cached)
	// Requests' own latencies, with each TTFT basis.
	ivs[0].TTFT, ivs[0].TPOT, ivs[0].E2E, ivs[0].Output, ivs[0].TTFTBasis = 0.0136, 0.0024, 0.164, 64, sample.TTFTHTTP
	ivs[0].Held = 1.0174 // its slot since before its first token
	ivs[2].TTFT, ivs[2].Queue, ivs[2].TTFTBasis = 0.25, 0, sample.TTFTSlot
	ivs[4].TTFT, ivs[4].TTFTBasis = 0.00892, sample.TTFTPrefill
	// A failed request, with and without latencies of its own.
	failed, failedTimed := sample.Unknown(at, at), sample.Unknown(at.Add(-time.Second), at)
	failed.Failed, failedTimed.Failed, failedTimed.E2E = true, true, 0.75
	ivs = append(ivs, failed, failedTimed)
	var p packed
	for _, x := range ivs {
		p.add(x)
	}
	r := p.reader()
	for i, want := range ivs {
		if !r.more() {
			t.Fatalf("%d records read back, want %d", i, len(ivs))
		}
		// A peek twice is the same record; taken moves on.
		got := *r.peek()
		if again := *r.peek(); !same(again, got) {
			t.Fatalf("record %d: a second peek read %+v, the first %+v", i, again, got)
		}
		r.taken()
		if !same(got, want) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if r.more() {
		t.Errorf("more records than were added")
	}
}

// same compares two intervals field by field, NaN equal to NaN by its bits.
func same(a, b sample.Interval) bool {
	va, vb := values(&a), values(&b)
	la, lb := latencies(&a), latencies(&b)
	for i, v := range append(va[:], la[:]...) {
		w := append(vb[:], lb[:]...)[i]
		if math.Float64bits(*v) != math.Float64bits(*w) {
			return false
		}
	}
	ta, tb := tallies(&a), tallies(&b)
	for i := range ta {
		if math.Float64bits(*ta[i]) != math.Float64bits(*tb[i]) {
			return false
		}
	}
	return a.Start == b.Start && a.End == b.End && a.Request == b.Request && a.Observed == b.Observed &&
		a.Hole == b.Hole && a.TTFTBasis == b.TTFTBasis && a.Failed == b.Failed
}

// Many records across chunks, heap and mapped ones, read by two readers
// at once (the feed reads ahead with a copy of itself), and out of order:
// sortByEnd puts them in the order of their ends, stably.
func TestPackedChunksCopiesAndOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	at := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	var ivs []sample.Interval
	var p packed
	for i := range 60000 {
		end := at.Add(time.Duration(i) * 20 * time.Millisecond)
		if i%1000 == 999 {
			end = at.Add(time.Duration(rng.IntN(i)) * 20 * time.Millisecond) // a few late ones
		}
		x := sample.Unknown(end.Add(-time.Duration(rng.Int64N(int64(10*time.Second)))), end)
		x.Tokens, x.UserSeconds = float64(i), rng.Float64()
		x.Observed = true
		ivs = append(ivs, x)
		p.add(x)
	}
	if len(p.chunks) < 3 {
		t.Fatalf("%d chunks, want records across several", len(p.chunks))
	}
	if runtime.GOOS == "linux" && len(p.maps) == 0 {
		t.Fatalf("%d chunks, none mapped: the heap's past %d bytes", len(p.chunks), heapChunks)
	}
	defer p.release()
	a := p.reader()
	for i := range 500 {
		a.next()
		_ = i
	}
	b := a // a copy reads on independently
	for i := 500; i < 600; i++ {
		if got := *b.next(); !same(got, ivs[i]) {
			t.Fatalf("copy: record %d = %+v, want %+v", i, got, ivs[i])
		}
	}
	if got := *a.next(); !same(got, ivs[500]) {
		t.Fatalf("original after the copy read on: %+v, want record 500", got)
	}

	if p.inOrder {
		t.Fatal("records with late ends are not in order")
	}
	p.sortByEnd()
	if !p.inOrder || p.len() != len(ivs) {
		t.Fatalf("after sortByEnd: in order %v, %d records, want true, %d", p.inOrder, p.len(), len(ivs))
	}
	var prev sample.Interval
	for r, i := p.reader(), 0; r.more(); i++ {
		cur := *r.next()
		if i > 0 && (cur.End.Before(prev.End) || cur.End.Equal(prev.End) && cur.Tokens < prev.Tokens) {
			t.Fatalf("record %d (end %v, tokens %v) after (end %v, tokens %v): not stably by end",
				i, cur.End, cur.Tokens, prev.End, prev.Tokens)
		}
		prev = cur
	}
}

// A zone per interval (a parser that made a fixed offset per line) is
// read back exactly too, each in its own zone.
func TestPackedZonePerInterval(t *testing.T) {
	at := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	var ivs []sample.Interval
	var p packed
	zones := map[*time.Location]bool{}
	for i := range 5000 {
		z := time.FixedZone("", (i%48-24)*1800)
		x := sample.Unknown(at.Add(time.Duration(i)*time.Second).In(z), at.Add(time.Duration(i+1)*time.Second).In(time.UTC))
		ivs = append(ivs, x)
		p.add(x)
		zones[x.Start.Location()], zones[x.End.Location()] = true, true
	}
	if len(zones) < 2500 || len(p.locs) != len(zones) {
		t.Errorf("%d zones held, %d given", len(p.locs), len(zones))
	}
	r := p.reader()
	for i, want := range ivs {
		if got := *r.next(); !same(got, want) || got.Start.Location() != want.Start.Location() {
			t.Fatalf("record %d: %+v, want %+v", i, got, want)
		}
	}
}
