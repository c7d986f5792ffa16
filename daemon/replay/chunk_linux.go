package replay

import "syscall"

// mappedChunk is the size of the chunks a long log's records go into past
// its first heapChunks bytes: four transparent huge pages.
const mappedChunk = 8 << 20

// mapChunk maps anonymous memory the kernel may back with huge pages. A
// long log's records are written once into fresh memory, where a page
// fault per 4 KiB cost about 13 % of a replay's CPU (bench/HISTORY.md,
// issue 16, round 6). Kernels from 6.7 place such a mapping on huge page
// boundaries; in older ones three of its four 2 MiB pieces are. ok is
// false when nothing could be mapped: the caller then takes heap memory.
func mapChunk() (b []byte, ok bool) {
	b, err := syscall.Mmap(-1, 0, mappedChunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, false
	}
	// Refused where transparent huge pages are off: 4 KiB pages then.
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	return b, true
}

// unmapChunk returns what mapChunk mapped (b at any length).
func unmapChunk(b []byte) {
	// Munmap fails only for a slice that is not a whole mapping of its
	// own, which b[:cap(b)] is.
	_ = syscall.Munmap(b[:cap(b)])
}
