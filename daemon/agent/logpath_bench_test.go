package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/internal/cpuclock"
	"github.com/tpsmon/tpsmon/sim/logsim"
	"github.com/tpsmon/tpsmon/sink"
)

func writeLog(b *testing.B, path string, n int, line func(int) string) {
	if err := logsim.WriteFile(path, n, line); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLogPath runs the daemon's log path end to end (tailer, parser,
// joiner, line-protocol output) over logs that appear whole once it runs,
// and reports lines per CPU second of the whole process: vllm-noisy is
// 1,000,000 lines of a busy vLLM V1 server (one stat line per 2,000
// request and access lines), s2-mix the bench harness's S2 (300,000 vLLM
// stat lines and 300,000 llama.cpp timing lines in two logs).
func BenchmarkLogPath(b *testing.B) {
	dir := b.TempDir()
	noisy := filepath.Join(dir, "noisy.src")
	f, err := os.Create(noisy)
	if err != nil {
		b.Fatal(err)
	}
	logsim.NoisyVLLM(f, 1_000_000, time.Now())
	f.Close()
	vllm, llama := filepath.Join(dir, "vllm.src"), filepath.Join(dir, "llama.src")
	writeLog(b, vllm, 300_000, func(i int) string {
		return logsim.VLLMStat(time.Unix(1_700_000_000+int64(i), 0), float64(i%2000))
	})
	writeLog(b, llama, 300_000, logsim.LlamaEval)
	for _, tc := range []struct {
		name  string
		logs  map[string]string // engine: source
		lines int
	}{
		{"vllm-noisy", map[string]string{"vllm": noisy}, 1_000_000},
		{"s2-mix", map[string]string{"vllm": vllm, "llamacpp": llama}, 600_000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var cpu time.Duration
			for range b.N {
				cpu += runLogPath(b, tc.logs)
			}
			b.ReportMetric(float64(tc.lines*b.N)/cpu.Seconds(), "lines/cpu-s")
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// runLogPath runs an agent whose servers are read from logs, links each
// source into place after the tailers started (so they read it all), and
// returns the CPU time spent until every position saved reaches the end.
func runLogPath(b *testing.B, logs map[string]string) time.Duration {
	cfg, err := config.Load("", false, nil)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	state := filepath.Join(dir, "positions")
	os.MkdirAll(state, 0o700)
	cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
	cfg.GPU.Backend = "none"
	cfg.Discovery.Enabled = false
	cfg.HTTP.Listen = ""
	cfg.Servers = nil
	sizes := map[string]int64{}
	for engine, src := range logs {
		cfg.Servers = append(cfg.Servers, config.ServerConfig{Name: engine, Engine: engine,
			Log: config.LogSourceConfig{File: filepath.Join(dir, engine+".log")}})
		fi, err := os.Stat(src)
		if err != nil {
			b.Fatal(err)
		}
		sizes[engine] = fi.Size()
	}
	a := newAgent(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(discard{})}},
		hooks{positionDir: state, logGrace: 1500 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	time.Sleep(300 * time.Millisecond) // the tailers wait for their files
	start := cpuclock.Self()
	for engine, src := range logs {
		if err := os.Link(src, filepath.Join(dir, engine+".log")); err != nil {
			b.Fatal(err)
		}
	}
	read := func() bool {
		for engine := range logs {
			pos, ok, _ := tail.LoadPosition(filepath.Join(state, engine+".json"))
			if !ok || pos.Offset != sizes[engine] {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(5 * time.Minute); !read(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the logs were not read within 5 minutes")
		}
	}
	used := cpuclock.Self() - start
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return used
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
