package main

import (
	"io"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/cpuclock"
	"github.com/tpsmon/tpsmon/sim/logsim"
)

// BenchmarkReplayLog replays logs with the engine detected, and reports
// lines per CPU second: vllm-noisy is 1,000,000 lines of a busy vLLM V1
// server (one stat line per 2,000 request and access lines); s2-vllm and
// s2-llamacpp are the two logs of the bench harness's S2 mix, 300,000
// vLLM stat lines and 300,000 llama.cpp timing lines (with docker -t's
// timestamps, which replay needs).
func BenchmarkReplayLog(b *testing.B) {
	logs, err := logsim.WriteReplayLogs(b.TempDir(), 300_000, time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range logs {
		b.Run(tc.Name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuclock.Self()
			for range b.N {
				out, _ := newOutput("lp", io.Discard)
				if err := runReplay(replayOpts{logFile: tc.Path, year: 2026, window: 10 * time.Second, server: "r", engine: "auto",
					host: "h", tz: "UTC"}, out, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			cpu := cpuclock.Self() - start
			b.ReportMetric(float64(tc.Lines*b.N)/cpu.Seconds(), "lines/cpu-s")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}
