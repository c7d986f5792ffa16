//go:build !linux

package statefile

import "syscall"

// oPath: without O_PATH, a directory that cannot be read is refused by
// its open's error.
const oPath = syscall.O_RDONLY
