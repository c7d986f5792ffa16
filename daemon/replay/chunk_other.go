//go:build !linux

package replay

// mapChunk maps nothing off Linux: chunks come from the heap.
func mapChunk() ([]byte, bool) { return nil, false }

func unmapChunk([]byte) {}
