package main

import (
	"bytes"
	"fmt"
	"log"
	"os/exec"
	"syscall"
	"time"

	"github.com/tpsmon/tpsmon/internal/sim/logsim"
)

// replay runs `tpsmon replay` on the noise-heavy vLLM log and on the S2
// mix's two logs (with the timestamps replay needs), a process per run as a
// user runs it, and reports its CPU time and peak RSS from rusage:
// start-up, reading, joining and writing the line protocol to /dev/null.
func (h *harness) replay(lines, runs int) (string, error) {
	logs, err := logsim.WriteReplayLogs(h.work, lines, time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC))
	if err != nil {
		return "", err
	}
	type result struct{ cpu, perSec, rssMiB []float64 }
	res := make([]result, len(logs))
	// The logs take turns, so that a neighbour's burst does not land on
	// one log only.
	for run := range runs {
		for i, l := range logs {
			cmd := exec.Command(h.tpsmon, "replay", "--format", "lp", "--log", l.Path, "--year", "2026",
				"--window", "10s", "--tz", "UTC", "--host", "h", "--server", "r")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr // stdout: /dev/null
			if err := cmd.Run(); err != nil {
				return "", fmt.Errorf("replay %s: %w: %s", l.Name, err, tail(stderr.String(), 3))
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			// A child's rusage counts the peak of the memory it started
			// in, this harness's (see stop): a figure at or below that is
			// the harness's, not the replay's.
			if self := statusKB("self", "VmHWM"); ru.Maxrss<<10 <= self {
				return "", fmt.Errorf("replay %s: peak RSS %d KiB is not above the harness's own %d KiB: not the replay's", l.Name, ru.Maxrss, self>>10)
			}
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
			res[i].cpu = append(res[i].cpu, cpu)
			res[i].perSec = append(res[i].perSec, float64(l.Lines)/max(cpu, 0.001))
			res[i].rssMiB = append(res[i].rssMiB, float64(ru.Maxrss)/1024)
			log.Printf("replay %s run %d: %.2f CPU-s for %d lines, peak RSS %.1f MiB", l.Name, run+1, cpu, l.Lines, float64(ru.Maxrss)/1024)
		}
	}
	s := fmt.Sprintf(`## Replay: `+"`tpsmon replay --format lp`"+` of recorded logs (%d runs each, a process per run)

Each cell is min / median / max over the runs. CPU is the process's whole rusage (start-up included);
the line protocol goes to /dev/null.

| log | lines | CPU seconds | lines per CPU second | peak RSS, MiB | target |
|---|---|---|---|---|---|
`, runs)
	for i, l := range logs {
		s += fmt.Sprintf("| %s | %d | %s | %s | %s | ≥ 1,000,000 |\n", l.Name, l.Lines,
			spread(res[i].cpu, "%.2f"), spread(res[i].perSec, "%.0f"), spread(res[i].rssMiB, "%.1f"))
	}
	return s + `
The same in one process, without start-up and with a warm heap: ` + "`go test -run XXX -bench ReplayLog ./cmd/tpsmon`" + `.
`, nil
}
