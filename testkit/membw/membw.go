// Package membw measures the memory bandwidth a CPU inference server can
// use, the peak its decode ceiling is set against when it runs on no GPU.
//
// The probe: each of threads goroutines streams through its own buffer,
// 64 MiB each (far past the last-level cache, so every pass comes from
// DRAM), once summing its 8-byte words and once copying it into a second
// buffer (the runtime's memmove, vectorised); a sum pass reads its bytes
// once, a copy pass moves them twice (read and write). The best of the
// passes over all rounds is the peak: a peak must not be under what the
// server reaches, and a pass slowed by another process only lowers one
// round. It takes about a second.
package membw

import (
	"sync"
	"time"
)

// Sink keeps the passes' results alive, so no pass is optimised away.
var Sink uint64

// BufBytes is each goroutine's buffer.
const BufBytes = 64 << 20

// Probe returns the best bandwidth, in 10^9 bytes/s, that threads
// goroutines reached together over rounds rounds.
func Probe(threads, rounds int) float64 {
	threads, rounds = max(threads, 1), max(rounds, 1)
	src := make([][]uint64, threads)
	dst := make([][]uint64, threads)
	for i := range src {
		src[i], dst[i] = make([]uint64, BufBytes/8), make([]uint64, BufBytes/8)
		for j := range src[i] {
			src[i][j] = uint64(j) // touch every page before timing
		}
		copy(dst[i], src[i])
	}
	var best float64
	for range rounds {
		for _, pass := range []struct {
			run   func(i int) uint64
			bytes float64
		}{
			{func(i int) uint64 { return sum(src[i]) }, BufBytes},
			{func(i int) uint64 { copy(dst[i], src[i]); return dst[i][len(dst[i])-1] }, 2 * BufBytes},
		} {
			var wg sync.WaitGroup
			out := make([]uint64, threads)
			start := time.Now()
			for i := range threads {
				wg.Go(func() { out[i] = pass.run(i) })
			}
			wg.Wait()
			secs := time.Since(start).Seconds()
			for _, v := range out {
				Sink += v
			}
			if bw := pass.bytes * float64(threads) / secs / 1e9; bw > best {
				best = bw
			}
		}
	}
	return best
}

// sum adds b's words, eight at a time so the loads, not the adds, set the
// pace.
func sum(b []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(b); i += 8 {
		s0 += b[i]
		s1 += b[i+1]
		s2 += b[i+2]
		s3 += b[i+3]
		s4 += b[i+4]
		s5 += b[i+5]
		s6 += b[i+6]
		s7 += b[i+7]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}
