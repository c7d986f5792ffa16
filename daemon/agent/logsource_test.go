package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/syncbuf"
	"github.com/tpsmon/tpsmon/window"
)

// sglangLine is a decode line, written every second: 160 tokens/s since
// the line before it, as SGLang prints when 4 requests run (a line every
// 40 decode steps: 160 tokens, a second at 160 tokens/s). A line whose
// rate disagreed with its running requests would span another time than
// the second between the lines: the first line read, which has no line
// before it, spans what the line says.
func sglangLine(t time.Time) string {
	return fmt.Sprintf("[%s TP0] Decode batch, #running-req: 4, #token: 100, token usage: 0.10, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0\n",
		t.Format("2006-01-02 15:04:05"), float64(lineTokens))
}

// lineTokens is what each sglangLine says was made since the one before.
const lineTokens = 160

// runOnLog runs the pipeline on an SGLang log for d, appending a line every
// second, and returns the tokens of every server window written.
func runOnLog(t *testing.T, logPath, state string, d time.Duration) (tokens int64, windows int, sources []string) {
	t.Helper()
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
	cfg.GPU.Backend = "none"
	cfg.Servers = []config.ServerConfig{{Name: "sgl", Engine: "sglang", Log: config.LogSourceConfig{File: logPath}, GPUs: []string{"auto"}}}
	var out bytes.Buffer
	a := newAgent(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(&out)}},
		hooks{positionDir: state, logGrace: 1500 * time.Millisecond, logPoll: 250 * time.Millisecond})
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	go func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tk.C:
				f.WriteString(sglangLine(now))
			}
		}
	}()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "tpsmon_server,") {
			continue
		}
		windows++
		for _, kv := range strings.Split(strings.Fields(l)[1], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "tokens":
				n, _ := strconv.ParseInt(strings.TrimSuffix(v, "i"), 10, 64)
				tokens += n
			case "source":
				sources = append(sources, strings.Trim(v, `"`))
			}
		}
	}
	return tokens, windows, sources
}

func TestLogSourceLiveAndRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "sglang.log")
	state := filepath.Join(dir, "positions")
	os.MkdirAll(state, 0o700)
	// History from before tpsmon ran is not replayed: reading starts at
	// the end of a file without a saved position.
	os.WriteFile(logPath, []byte(strings.Repeat(sglangLine(time.Now().Add(-time.Hour)), 50)), 0o644)

	tok1, win1, src := runOnLog(t, logPath, state, 4500*time.Millisecond)
	for _, s := range src {
		if s != "log" {
			t.Errorf("source %q, want log", s)
		}
	}
	lines1 := countLines(t, logPath) - 50
	// Each line counts the time since the line before it, as read; the
	// first, its own span (a second). Reads are 250 ms apart.
	if win1 < 3 || tok1 < lineTokens*int64(lines1)-80 || tok1 > lineTokens*int64(lines1)+80 {
		t.Errorf("first run: %d tokens in %d windows for %d lines of %d tokens", tok1, win1, lines1, lineTokens)
	}
	if _, err := os.Stat(filepath.Join(state, "sgl.json")); err != nil {
		t.Errorf("position not saved: %v", err)
	}
	// A restart resumes after the lines already taken: nothing twice.
	tok2, _, _ := runOnLog(t, logPath, state, 3500*time.Millisecond)
	lines2 := countLines(t, logPath) - 50 - lines1
	if tok2 > lineTokens*int64(lines2+1)+80 {
		t.Errorf("second run: %d tokens for %d new lines: old lines read again", tok2, lines2)
	}
}

// A log's intervals wait for the tick after their read (logReader.alive).
// Here the tick never comes (an hour), so every line read is one that
// waits, and must still be taken: when the daemon stops, into the last
// windows and into the position saved (a restart neither reads them again
// nor loses them); when the log becomes unreadable, at once, into the
// windows they belong to (no tick comes for a log that cannot be read).
func TestLogLinesWaitingForTheTickAreTaken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// then ends the log's reading after three lines were written.
		then func(t *testing.T, logPath string, out *syncbuf.Buffer)
	}{
		{"the daemon stops", func(*testing.T, string, *syncbuf.Buffer) {}},
		{"the log becomes a FIFO", func(t *testing.T, logPath string, out *syncbuf.Buffer) {
			fifo := logPath + ".fifo"
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(fifo, logPath); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the lines' windows written while the daemon runs", func() bool {
				return serverTokens(out.String()) >= 3*lineTokens-80
			})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			logPath := filepath.Join(dir, "sglang.log")
			state := filepath.Join(dir, "positions")
			os.MkdirAll(state, 0o700)
			head := sglangLine(time.Now().Add(-time.Minute))
			if err := os.WriteFile(logPath, []byte(head), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := configtest.Private(t)
			cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
			cfg.GPU.Backend = "none"
			cfg.Servers = []config.ServerConfig{{Name: "sgl", Engine: "sglang", Log: config.LogSourceConfig{File: logPath}, GPUs: []string{"auto"}}}
			var out, logs syncbuf.Buffer
			a := newAgent(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(&out)}, Log: slog.New(slog.NewTextHandler(&logs, nil))},
				hooks{positionDir: state, logGrace: 6 * time.Second, logPoll: time.Hour})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// The first line read spans its own second: after the first
			// window began.
			time.Sleep(time.Second)
			for range 3 {
				time.Sleep(time.Second)
				f.WriteString(sglangLine(time.Now()))
			}
			time.Sleep(500 * time.Millisecond) // read on notification, within milliseconds
			tc.then(t, logPath, &out)
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if late := counted(a.metrics.lateTokens); late != 0 {
				t.Errorf("%d tokens late", late)
			}
			pos, ok, err := tail.LoadPosition(filepath.Join(state, "sgl.json"))
			if err != nil || !ok || pos.Offset < int64(len(head)) {
				t.Fatalf("position %+v (saved %v, %v)", pos, ok, err)
			}
			taken := 3 // the log became a FIFO after its three lines were read
			if fi, err := os.Stat(logPath); err == nil && fi.Mode().IsRegular() {
				b, err := os.ReadFile(logPath)
				if err != nil || pos.Offset > int64(len(b)) {
					t.Fatalf("position %+v in %d bytes (%v)", pos, len(b), err)
				}
				taken = bytes.Count(b[len(head):pos.Offset], []byte("\n"))
			}
			// Each line counts the second since the line before it; the
			// first, its own.
			tokens, want := serverTokens(out.String()), lineTokens*int64(taken)
			if taken == 0 || tokens < want-80 || tokens > want+80 {
				t.Errorf("%d tokens in the windows for %d lines taken (of 3 written), want %d ± 80; output:\n%s\nlog:\n%s",
					tokens, taken, want, out.String(), logs.String())
			}
		})
	}
}

// serverTokens sums the tokens of the server windows in line protocol.
func serverTokens(lp string) int64 {
	var tokens int64
	for _, l := range strings.Split(lp, "\n") {
		if !strings.HasPrefix(l, "tpsmon_server,") {
			continue
		}
		for _, kv := range strings.Split(strings.Fields(l)[1], ",") {
			if k, v, _ := strings.Cut(kv, "="); k == "tokens" {
				n, _ := strconv.ParseInt(strings.TrimSuffix(v, "i"), 10, 64)
				tokens += n
			}
		}
	}
	return tokens
}

func countLines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// A log's start-up line that states the engine's version, written before
// tpsmon ran (read from its end, the head is still looked at), tags every
// server window with it.
func TestLogSourceNamesEngineVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logPath := filepath.Join(dir, "vllm.log")
	vllmLine := func(t time.Time) string {
		return fmt.Sprintf("INFO %s metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 160.0 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 1.0%%, CPU KV cache usage: 0.0%%.\n",
			t.UTC().Format("01-02 15:04:05"))
	}
	os.WriteFile(logPath, []byte(fmt.Sprintf("INFO %s api_server.py:528] vLLM API server version 0.6.3.post1\n", time.Now().UTC().Add(-time.Minute).Format("01-02 15:04:05"))), 0o644)
	cfg := configtest.Private(t)
	cfg.Window, cfg.Grace = time.Second, 100*time.Millisecond
	cfg.GPU.Backend = "none"
	cfg.Servers = []config.ServerConfig{{Name: "v", Log: config.LogSourceConfig{File: logPath}}}
	var out syncbuf.Buffer
	a := newAgent(cfg, Options{Outputs: []WindowWriter{sink.NewLPWriter(&out)}},
		hooks{positionDir: filepath.Join(dir, "pos"), logGrace: 1500 * time.Millisecond, logPoll: 250 * time.Millisecond})
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	go func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tk.C:
				f.WriteString(vllmLine(now))
			}
		}
	}()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "tpsmon_server,") {
			n++
			if !strings.HasPrefix(l, "tpsmon_server,engine=vllm,engine_version=0.6.3.post1,") {
				t.Errorf("window without the engine's version: %s", l)
			}
		}
	}
	if n == 0 {
		t.Errorf("no server window written: %s", out.String())
	}
}

// The first line read after the start speaks of time before it: a
// llama.cpp request whose 2 s decode began before the daemon's first
// window. That part is no window's, and not late either: counted in
// tpsmon_tokens_before_start_total, the rest in the windows, none lost.
func TestFirstLineBeforeStartIsNotLate(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "llama.log")
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace = 250*time.Millisecond, 50*time.Millisecond
	cfg.GPU.Backend = "none"
	cfg.Servers = []config.ServerConfig{{Name: "llama", Engine: "llamacpp", Log: config.LogSourceConfig{File: logPath}}}
	out, sd := &recorder{}, &notes{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	a := newAgent(cfg, Options{Outputs: []WindowWriter{out}},
		hooks{notify: sd.send, logGrace: 500 * time.Millisecond, logPoll: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	ready := sd.told(sd.waitFor(t, 0, "READY=1", 10*time.Second))
	line := "slot print_timing: id  0 | task 7 |        eval time =    2000.00 ms /   800 tokens (    2.50 ms per token,   400.00 tokens per second)\n"
	writing := time.Now() // the line is read, and timed, after this
	if err := os.WriteFile(logPath, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the line's window written", func() bool { return out.closedFrom(writing.Truncate(cfg.Window)) })
	read := time.Now() // and before this
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var kept int64
	for _, n := range out.tokensMs("llama") {
		kept += n
	}
	before, late := counted(a.metrics.beforeTokens), counted(a.metrics.lateTokens)
	// The decode began 2 s before the line was read, between writing and
	// read; the first window is the one the daemon started in, between
	// began and READY.
	share := func(at, start time.Time) float64 {
		return 800 * (2*time.Second - at.Sub(window.Start(start, cfg.Window))).Seconds() / 2
	}
	if lo, hi := share(read, began), share(writing, ready); before == 0 || float64(before) < lo-2 || float64(before) > hi+2 {
		t.Errorf("%d tokens counted before the first window, want %.0f to %.0f", before, lo, hi)
	}
	if late != 0 {
		t.Errorf("%d tokens late: the time before the start counted as late", late)
	}
	if sum := kept + int64(before); sum < 798 || sum > 800 {
		t.Errorf("windows %d + before the start %d = %d tokens, want 800", kept, before, sum)
	}
}
