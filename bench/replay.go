package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/tpsmon/tpsmon/sim/logsim"
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
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	for run := range runs {
		for i, l := range logs {
			// Through a small process of this program's (see spawn), so
			// that the rusage is the replay's own, not this harness's.
			cmd := exec.Command(self, spawnArg, h.tpsmon, "replay", "--format", "lp", "--log", l.Path, "--year", "2026",
				"--window", "10s", "--tz", "UTC", "--host", "h", "--server", "r")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return "", fmt.Errorf("replay %s: %w: %s", l.Name, err, tail(stderr.String(), 3))
			}
			var cpuNs, maxKB int64
			if _, err := fmt.Sscan(string(out), &cpuNs, &maxKB); err != nil {
				return "", fmt.Errorf("replay %s: the spawner said %q: %w", l.Name, out, err)
			}
			cpu := time.Duration(cpuNs).Seconds()
			res[i].cpu = append(res[i].cpu, cpu)
			res[i].perSec = append(res[i].perSec, float64(l.Lines)/max(cpu, 0.001))
			res[i].rssMiB = append(res[i].rssMiB, float64(maxKB)/1024)
			log.Printf("replay %s run %d: %.2f CPU-s for %d lines, peak RSS %.1f MiB", l.Name, run+1, cpu, l.Lines, float64(maxKB)/1024)
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

// spawnArg makes this program a spawner: it runs the command that follows
// (its output to /dev/null), waits, and prints the command's CPU time in
// ns and peak RSS in KiB. A child's rusage counts the peak of the memory
// it started in (Go starts a child with vfork, and Linux carries the old
// memory's peak across exec): started from this small process, not from
// the harness that has generated logs and run daemons, that is small.
const spawnArg = "-spawn-rusage"

func spawn(args []string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if self := statusKB("self", "VmHWM"); ru.Maxrss<<10 <= self {
		return fmt.Errorf("peak RSS %d KiB is not above the spawner's own %d KiB: not the command's", ru.Maxrss, self>>10)
	}
	fmt.Println(ru.Utime.Nano()+ru.Stime.Nano(), ru.Maxrss)
	return nil
}
