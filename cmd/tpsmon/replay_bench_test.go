package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/cpuclock"
	"github.com/tpsmon/tpsmon/internal/sim/logsim"
)

// BenchmarkReplayLog replays logs with the engine detected, and reports
// lines per CPU second: vllm-noisy is 1,000,000 lines of a busy vLLM V1
// server (one stat line per 2,000 request and access lines); s2-vllm and
// s2-llamacpp are the two logs of the bench harness's S2 mix, 300,000
// vLLM stat lines and 300,000 llama.cpp timing lines (with docker -t's
// timestamps, which replay needs).
func BenchmarkReplayLog(b *testing.B) {
	dir := b.TempDir()
	start := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	write := func(name string, n int, line func(i int) string) string {
		path := filepath.Join(dir, name)
		if err := logsim.WriteFile(path, n, line); err != nil {
			b.Fatal(err)
		}
		return path
	}
	noisy := filepath.Join(dir, "noisy.log")
	f, err := os.Create(noisy)
	if err != nil {
		b.Fatal(err)
	}
	if err := logsim.NoisyVLLM(f, 1_000_000, start); err != nil {
		b.Fatal(err)
	}
	f.Close()
	vllm := write("vllm.log", 300_000, func(i int) string {
		return logsim.VLLMStat(start.Add(time.Duration(i)*time.Second), float64(i%2000))
	})
	llama := write("llama.log", 300_000, func(i int) string {
		// A request every 20 ms, stamped by docker -t to the nanosecond.
		return start.Add(time.Duration(i)*20*time.Millisecond+time.Duration(i%997)).Format(time.RFC3339Nano) + " " + logsim.LlamaEval(i)
	})
	for _, tc := range []struct {
		name, path string
		lines      int
	}{
		{"vllm-noisy", noisy, 1_000_000},
		{"s2-vllm", vllm, 300_000},
		{"s2-llamacpp", llama, 300_000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			start := cpuclock.Self()
			for range b.N {
				out, _ := newOutput("lp", io.Discard)
				if err := runReplay(replayOpts{logFile: tc.path, year: 2026, window: 10 * time.Second, server: "r", engine: "auto",
					host: "h", tz: "UTC"}, out, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			cpu := cpuclock.Self() - start
			b.ReportMetric(float64(tc.lines*b.N)/cpu.Seconds(), "lines/cpu-s")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}
