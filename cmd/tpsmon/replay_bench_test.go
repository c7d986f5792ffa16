package main

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/sim/logsim"
)

// cpuTime is what this process has spent so far, user and system: on a
// shared machine wall time says more about the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplayLog replays a 1,000,000-line vLLM V1 log with one stat
// line per 2,000 request and access lines, engine detected, and reports
// lines per CPU second.
func BenchmarkReplayLog(b *testing.B) {
	const n = 1_000_000
	path := filepath.Join(b.TempDir(), "vllm.log")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := logsim.NoisyVLLM(f, n, time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	for range b.N {
		out, _ := newOutput("lp", io.Discard)
		if err := runReplay(replayOpts{logFile: path, year: 2026, window: 10 * time.Second, server: "r", engine: "auto",
			host: "h", tz: "UTC"}, out, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cpuTime() - start
	b.ReportMetric(float64(n*b.N)/cpu.Seconds(), "lines/cpu-s")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
}
