// Package logsim writes the logs inference servers write, for the
// benchmarks of the log path: vLLM V1 stat lines, llama.cpp timing lines,
// and the request and access lines that outnumber them on a busy server.
package logsim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// VLLMStat is a vLLM V1 stat line (with its newline) stamped t, gen
// tokens/s of output and three times that of prompt.
func VLLMStat(t time.Time, gen float64) string {
	return fmt.Sprintf("(APIServer pid=1) INFO %s [loggers.py:271] Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: 24 reqs, Waiting: 1 reqs, GPU KV cache usage: 61.2%%, Prefix cache hit rate: 12.0%%\n",
		t.Format("01-02 15:04:05"), 3*gen, gen)
}

// LlamaEval is a llama-server timing line (with its newline) of task.
func LlamaEval(task int) string {
	return fmt.Sprintf("slot print_timing: id  %d | task %d |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)\n", task%4, task)
}

// NoisyPerStat is how many request and access lines NoisyVLLM writes
// between two stat lines.
const NoisyPerStat = 2000

// NoisyVLLM writes n lines of a busy vLLM V1 server's log with request
// logging on, from start: per request a "Received request" and an "Added
// request" line (stamped) and uvicorn's access line (not stamped), 200
// lines a second, and a stat line every NoisyPerStat of them (10 s).
func NoisyVLLM(w io.Writer, n int, start time.Time) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	for i := range n {
		now := start.Add(time.Duration(i) * 5 * time.Millisecond)
		if i%(NoisyPerStat+1) == NoisyPerStat {
			bw.WriteString(VLLMStat(now, 1000+float64(i%13)))
			continue
		}
		stamp, req := now.Format("01-02 15:04:05"), i/3
		switch i % 3 {
		case 0:
			fmt.Fprintf(bw, "(APIServer pid=1) INFO %s [logger.py:43] Received request chatcmpl-%016x: prompt: 'Summarise the following text in three sentences.', params: SamplingParams(n=1, temperature=0.7, top_p=0.95, max_tokens=256), prompt_token_ids: None, lora_request: None.\n", stamp, req)
		case 1:
			fmt.Fprintf(bw, "(APIServer pid=1) INFO %s [async_llm.py:270] Added request chatcmpl-%016x.\n", stamp, req)
		default:
			fmt.Fprintf(bw, "(APIServer pid=1) INFO:     10.0.%d.%d:%d - \"POST /v1/chat/completions HTTP/1.1\" 200 OK\n", req%256, req%200, 30000+req%30000)
		}
	}
	return bw.Flush()
}

// WriteFile writes line(0) … line(n-1) to a new file at path.
func WriteFile(path string, n int, line func(i int) string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	for i := range n {
		bw.WriteString(line(i))
	}
	return errors.Join(bw.Flush(), f.Close())
}

// ReplayLog is one of the logs the replay benchmarks read.
type ReplayLog struct {
	Name, Path string
	Lines      int
}

// WriteReplayLogs writes the logs the replay benchmarks read into dir, from
// start: 1,000,000 lines of a busy vLLM V1 server (NoisyVLLM), and the two
// logs of the bench harness's S2 mix with the timestamps replay needs,
// n vLLM stat lines a second apart and n llama.cpp timing lines 20 ms
// apart, stamped by docker -t to the nanosecond.
func WriteReplayLogs(dir string, n int, start time.Time) ([]ReplayLog, error) {
	logs := []ReplayLog{{"vllm-noisy", filepath.Join(dir, "noisy.log"), 1_000_000},
		{"s2-vllm", filepath.Join(dir, "vllm.log"), n}, {"s2-llamacpp", filepath.Join(dir, "llama.log"), n}}
	f, err := os.Create(logs[0].Path)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(NoisyVLLM(f, logs[0].Lines, start), f.Close()); err != nil {
		return nil, err
	}
	if err := WriteFile(logs[1].Path, n, func(i int) string {
		return VLLMStat(start.Add(time.Duration(i)*time.Second), float64(i%2000))
	}); err != nil {
		return nil, err
	}
	err = WriteFile(logs[2].Path, n, func(i int) string {
		return start.Add(time.Duration(i)*20*time.Millisecond+time.Duration(i%997)).Format(time.RFC3339Nano) + " " + LlamaEval(i)
	})
	return logs, err
}
