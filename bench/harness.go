package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// harness holds the built binaries and the services of a run.
type harness struct {
	work     string
	tpsmon   string
	telegraf string
	floor    string // bench/floor, run beside each side of S1
	influx   string // base URL
	stops    []func()
	// sides are the daemons that run ("tpsmon", "telegraf").
	sides []string
	// profile, when set, is where tpsmon's CPU and allocation profiles of
	// S1's steady state go (read from its /debug/pprof/).
	profile string
	// scrape, when set, has tpsmon serve /metrics in S1, read every
	// window as a Prometheus would: "windows" with the joined windows'
	// gauges on it (http.window_metrics), "nowindows" without.
	scrape string
}

func (h *harness) runs(side string) bool { return slices.Contains(h.sides, side) }

func (h *harness) stopAll() {
	for i := len(h.stops) - 1; i >= 0; i-- {
		h.stops[i]()
	}
}

const telegrafPkg = "github.com/influxdata/telegraf/cmd/telegraf@v1.37.2"

const telegrafTags = "custom,inputs.nvidia_smi,inputs.prometheus,inputs.tail,outputs.influxdb_v2,parsers.grok,parsers.prometheus"

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		log.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// build compiles tpsmon, and Telegraf unless it is already there.
func (h *harness) build() error {
	built := filepath.Join(h.work, "build", "tpsmon")
	log.Printf("building tpsmon")
	if out, err := exec.Command("go", "build", "-o", built, "./cmd/tpsmon").CombinedOutput(); err != nil {
		return fmt.Errorf("build tpsmon: %v\n%s", err, out)
	}
	telegraf := filepath.Join(goEnv("GOPATH"), "bin", "telegraf")
	if _, err := os.Stat(telegraf); err != nil && h.runs("telegraf") {
		log.Printf("building Telegraf (go install -tags %q %s; a few minutes the first time)", telegrafTags, telegrafPkg)
		cmd := exec.Command("go", "install", "-tags", telegrafTags, telegrafPkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build telegraf: %w", err)
		}
	}
	floor := filepath.Join(h.work, "build", "floor")
	if out, err := exec.Command("go", "build", "-o", floor, "./bench/floor").CombinedOutput(); err != nil {
		return fmt.Errorf("build floor: %v\n%s", err, out)
	}
	var err error
	if h.tpsmon, err = install(built, h.work); err != nil {
		return err
	}
	if h.floor, err = install(floor, h.work); err != nil {
		return err
	}
	if _, err := os.Stat(telegraf); err == nil {
		if h.telegraf, err = install(telegraf, h.work); err != nil {
			return err
		}
	}
	influxd := filepath.Join(goEnv("GOPATH"), "bin", "influxd")
	if _, err := os.Stat(influxd); err != nil {
		cmd := exec.Command("go", "install", "github.com/influxdata/influxdb/cmd/influxd@v1.8.10")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build influxd: %w", err)
		}
	}
	return h.startInflux(influxd)
}

// install copies the binary at src into dir with plain writes (as dpkg
// does; not copy_file_range), as a package manager puts it on a node. Go's linker writes its output through
// a shared mapping, which leaves the file in the page cache as large
// folios; a process mapping such a file gets whole 2 MiB pieces of it
// resident, touched or not (tpsmon's peak RSS read 23.4 MiB run from its
// build output, 18.4 MiB run from a copy, the same with a cold cache).
// Both daemons run from copies, so that RSS compares what they touch.
func install(src, dir string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	defer in.Close()
	dst := filepath.Join(dir, filepath.Base(src))
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return "", fmt.Errorf("install: %w", err)
	}
	if _, err := io.Copy(struct{ io.Writer }{out}, in); err != nil {
		out.Close()
		return "", fmt.Errorf("install %s: %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return "", fmt.Errorf("install %s: %w", dst, err)
	}
	return dst, nil
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (h *harness) startInflux(bin string) error {
	dir := filepath.Join(h.work, "influx")
	addr := freePort()
	cmd := exec.Command(bin, "run")
	cmd.Env = append(os.Environ(), "INFLUXDB_REPORTING_DISABLED=true", "INFLUXDB_BIND_ADDRESS="+freePort(),
		"INFLUXDB_HTTP_BIND_ADDRESS="+addr, "INFLUXDB_HTTP_LOG_ENABLED=false", "INFLUXDB_META_DIR="+dir+"/meta",
		"INFLUXDB_DATA_DIR="+dir+"/data", "INFLUXDB_DATA_WAL_DIR="+dir+"/wal", "INFLUXDB_DATA_QUERY_LOG_ENABLED=false",
		"INFLUXDB_LOGGING_LEVEL=warn")
	if err := cmd.Start(); err != nil {
		return err
	}
	h.stops = append(h.stops, func() { cmd.Process.Kill(); cmd.Wait() })
	h.influx = "http://" + addr
	for range 150 {
		if resp, err := http.Get(h.influx + "/ping"); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("influxd did not start")
}

// query runs InfluxQL and returns the first statement's series.
func (h *harness) query(db, q string) ([]struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Values  [][]any  `json:"values"`
}, error) {
	v := url.Values{"q": {q}, "db": {db}}
	resp, err := http.PostForm(h.influx+"/query", v)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Results []struct {
			Series []struct {
				Name    string   `json:"name"`
				Columns []string `json:"columns"`
				Values  [][]any  `json:"values"`
			} `json:"series"`
			Error string `json:"error"`
		} `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if len(out.Results) == 0 {
		return nil, nil
	}
	if out.Results[0].Error != "" {
		return nil, fmt.Errorf("%s", out.Results[0].Error)
	}
	return out.Results[0].Series, nil
}

// points counts the points stored in db: per measurement, the largest
// field count.
func (h *harness) points(db string) int {
	ms, err := h.query(db, "SHOW MEASUREMENTS")
	if err != nil || len(ms) == 0 {
		return 0
	}
	total := 0
	for _, row := range ms[0].Values {
		name := row[0].(string)
		s, err := h.query(db, fmt.Sprintf(`SELECT count(*) FROM %q`, name))
		if err != nil || len(s) == 0 {
			continue
		}
		best := 0.0
		for _, v := range s[0].Values[0][1:] {
			if f, ok := v.(float64); ok && f > best {
				best = f
			}
		}
		total += int(best)
	}
	return total
}

// usage is what a process cost.
type usage struct {
	cpu     time.Duration // user + system
	maxRSS  int64         // bytes
	elapsed time.Duration
}

// proc is a running measured process.
type proc struct {
	cmd     *exec.Cmd
	start   time.Time
	log     *bytes.Buffer
	rssSeen int64 // the last RSS read
}

func start(name string, args ...string) (*proc, error) {
	cmd := exec.Command(name, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &proc{cmd: cmd, start: time.Now(), log: &buf}, nil
}

// cpu reads from /proc the CPU time so far of the process and of the
// children it ran and waited for (Telegraf's nvidia_smi input runs its
// binary every interval): the same account as the rusage of the whole run.
func (p *proc) cpu() time.Duration { return p.ticks(11, 12, 13, 14) } // utime stime cutime cstime

// cpuSelf is the process's own CPU time, without its children's.
func (p *proc) cpuSelf() time.Duration { return p.ticks(11, 12) }

// ticks sums fields of /proc/PID/stat (counted after the command name).
func (p *proc) ticks(fields ...int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	var n int64
	for _, k := range fields {
		v, _ := strconv.ParseInt(f[k], 10, 64)
		n += v
	}
	return time.Duration(n) * time.Second / 100 // USER_HZ
}

// onCPU is the process's own time on a CPU, without its children's,
// to the nanosecond: the sum of its threads' schedstat. /proc/PID/stat
// counts in 10 ms ticks, and S1's floor is 9-40 of them over its steady
// span, so a tick either way moved its ratio by up to a tenth. A thread
// that ended would take its time out of the sum; Go's threads do not end
// unless locked to a goroutine that ends, which neither S1 process does.
func (p *proc) onCPU() time.Duration {
	dir := fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // ended since the listing
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			ns += v
		}
	}
	return time.Duration(ns)
}

// rss reads the resident set size now.
func (p *proc) rss() int64 {
	p.rssSeen = statusKB(p.cmd.Process.Pid, "VmRSS")
	return p.rssSeen
}

// statusKB reads a size from /proc/PID/status ("self" for this process),
// in bytes; 0 when it cannot.
func statusKB(pid any, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%v/status", pid))
	if err != nil {
		return 0
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// stop ends the process with SIGTERM and returns its rusage, with its
// peak RSS read from /proc just before: rusage's counts what this harness
// held when it started the process too (Go starts a child with vfork, and
// Linux carries the old memory's peak across exec).
func (p *proc) stop() (usage, error) {
	hwm := statusKB(p.cmd.Process.Pid, "VmHWM")
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	ru, ok := p.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return usage{}, fmt.Errorf("no rusage")
	}
	if hwm == 0 {
		hwm = ru.Maxrss << 10 // gone already: at least the process's own
	}
	return usage{
		cpu:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		maxRSS:  hwm,
		elapsed: time.Since(p.start),
	}, nil
}

// quiet waits until the process's CPU time stops growing: it has read
// everything there was.
func (p *proc) quiet(ctx context.Context) {
	last := p.cpu()
	still := 0
	for still < 4 && ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		now := p.cpu()
		if now-last < 20*time.Millisecond {
			still++
		} else {
			still = 0
		}
		last = now
	}
}

// header says on what and how the numbers were taken.
func (h *harness) header(args []string) string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := regexp.MustCompile(`model name\s*:\s*(.*)`).FindSubmatch(b); m != nil {
			model = string(m[1])
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1] + " kB"
	}
	return fmt.Sprintf(`# tpsmon vs Telegraf: results

Taken %s on %d CPU cores (%s), %s of memory, %s; Telegraf v1.37.2 (built from the module, so its
binary calls itself "Telegraf unknown").

Command: `+"`go run ./bench %s`"+` (from the repository root). Telegraf was built with
`+"`go install -tags \"%s\" %s`"+`.

`, time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), model, mem, runtime.Version(),
		strings.Join(args, " "), telegrafTags, telegrafPkg)
}

// profileSteady reads tpsmon's CPU profile over span from its pprof
// endpoint at addr, then its allocations since start, into h.profile
// under prefix, and logs the top entries of each.
func (h *harness) profileSteady(addr, prefix string, span time.Duration) {
	get := func(path, file string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			log.Printf("profile %s: %v", path, err)
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			log.Printf("profile %s: %d %v", path, resp.StatusCode, err)
			return
		}
		out := filepath.Join(h.profile, prefix+file)
		if err := os.WriteFile(out, b, 0o644); err != nil {
			log.Printf("profile: %v", err)
			return
		}
		top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", h.tpsmon, out).CombinedOutput()
		if err != nil {
			log.Printf("pprof %s: %v", out, err)
		}
		log.Printf("%s:\n%s", out, top)
	}
	get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(span.Seconds())), ".cpu.pprof")
	get("/debug/pprof/allocs", ".allocs.pprof")
}
