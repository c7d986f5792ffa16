// Package cpuclock reads the CPU time this process has spent, which
// benchmarks report instead of wall time: on a shared machine wall time
// says more about the neighbours than about the code.
package cpuclock

import (
	"syscall"
	"time"
)

// Self is the user and system CPU time this process has spent so far.
func Self() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
