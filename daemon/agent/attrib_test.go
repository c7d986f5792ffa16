//go:build cgo

package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/nvml"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/testkit/loopback"
	"github.com/tpsmon/tpsmon/testkit/testparallel"
	"github.com/tpsmon/tpsmon/testkit/tpsmonbin"
)

// The attribution test runs this test binary again in other roles, as
// other users: an inference server (listening, with a worker child that
// NVML reports on a GPU) and the daemon itself.
const roleEnv = "TPSMON_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		// The parallel tests wait on daemons and real time.
		if err := testparallel.AtLeast(8); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(m.Run())
	case "server":
		err := runServerRole()
		if err != nil {
			fmt.Fprintln(os.Stderr, "server role:", err)
			os.Exit(1)
		}
	case "worker":
		io.Copy(io.Discard, os.Stdin) // until the server ends
	case "daemon":
		if err := runDaemonRole(); err != nil {
			fmt.Fprintln(os.Stderr, "daemon role:", err)
			os.Exit(1)
		}
	case "flood":
		if err := runFloodRole(); err != nil {
			fmt.Fprintln(os.Stderr, "flood role:", err)
			os.Exit(1)
		}
	}
	os.Exit(0)
}

// runServerRole listens on TPSMON_TEST_PORT like a vLLM API server, starts
// a worker (the engine core that holds the GPU), prints the worker's PID
// and serves until stdin closes.
func runServerRole() error {
	ln, err := net.Listen("tcp", "127.0.0.1:"+os.Getenv("TPSMON_TEST_PORT"))
	if err != nil {
		return err
	}
	go http.Serve(ln, &vllmsim.Driven{Rate: 100, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	worker := exec.Command("/proc/self/exe", "worker")
	worker.Env = []string{roleEnv + "=worker"}
	in, err := worker.StdinPipe()
	if err != nil {
		return err
	}
	if err := worker.Start(); err != nil {
		return err
	}
	fmt.Printf("worker %d\n", worker.Process.Pid)
	io.Copy(io.Discard, os.Stdin)
	in.Close()
	return worker.Wait()
}

// runDaemonRole runs the agent with go-nvml's mock for NVML, its GPU i
// running the processes TPSMON_TEST_GPU_PIDS lists (i:pid,...), for the
// servers of TPSMON_TEST_SERVERS (name:port,...), until stdin closes. It
// logs JSON to stderr and prints where /readyz is.
func runDaemonRole() error {
	cfg, err := config.Load("", false, nil)
	if err != nil {
		return err
	}
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Discovery.Enabled = false
	cfg.Window, cfg.Grace, cfg.GPU.Interval = time.Second, 200*time.Millisecond, 100*time.Millisecond
	for _, s := range strings.Split(os.Getenv("TPSMON_TEST_SERVERS"), ",") {
		name, port, _ := strings.Cut(s, ":")
		cfg.Servers = append(cfg.Servers, config.ServerConfig{Name: name, Engine: "vllm", GPUs: []string{"auto"},
			MetricsURL: "http://127.0.0.1:" + port + "/metrics", ScrapeInterval: 200 * time.Millisecond})
	}
	onGPU := map[int][]gonvml.ProcessInfo{}
	for _, s := range strings.Split(os.Getenv("TPSMON_TEST_GPU_PIDS"), ",") {
		i, pid, _ := strings.Cut(s, ":")
		n, _ := strconv.Atoi(i)
		p, _ := strconv.Atoi(pid)
		onGPU[n] = append(onGPU[n], gonvml.ProcessInfo{Pid: uint32(p)})
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var rounds atomic.Int64
	lib := dgxh100.New()
	for i, d := range lib.Devices {
		dev := d.(*server.Device)
		dev.UUID = fmt.Sprintf("GPU-test-%d", i)
		dev.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{Gpu: 50}, gonvml.SUCCESS }
		dev.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return 300_000, gonvml.SUCCESS }
		dev.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		dev.GetTemperatureFunc = func(gonvml.TemperatureSensors) (uint32, gonvml.Return) { return 40, gonvml.SUCCESS }
		dev.GetClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 1980, gonvml.SUCCESS }
		// An H100 SXM's memory, for the decode ceiling's peak.
		dev.GetMemoryBusWidthFunc = func() (uint32, gonvml.Return) { return 5120, gonvml.SUCCESS }
		dev.GetMaxClockInfoFunc = func(gonvml.ClockType) (uint32, gonvml.Return) { return 2619, gonvml.SUCCESS }
		dev.GetCurrentClocksEventReasonsFunc = func() (uint64, gonvml.Return) { return 0, gonvml.SUCCESS }
		dev.GetSamplesFunc = func(gonvml.SamplingType, uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
			return 0, nil, gonvml.ERROR_NOT_SUPPORTED
		}
		dev.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) { return gonvml.GpmSupport{}, gonvml.SUCCESS }
		dev.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
			if i == 0 { // once an attribution round
				log.Info(attribRound, "round", rounds.Add(1))
			}
			return onGPU[i], gonvml.SUCCESS
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	a := newAgent(cfg, Options{
		Log:       log,
		OpenGPU:   func() (GPUSampler, error) { return nvml.Open(lib, nil) },
		Outputs:   []WindowWriter{},
		Listening: func(addr net.Addr) { fmt.Printf("listening %s\n", addr) },
	}, hooks{attribEvery: 200 * time.Millisecond})
	return a.Run(ctx)
}

// attribRound is the daemon role's log line for each attribution round
// (its mock NVML asked for the processes on the GPUs).
const attribRound = "test: attribution round"

// identity is a user a process runs as, by setpriv.
type identity struct {
	uid    int
	groups []string // supplementary group names, where the system has them
}

func (id identity) command(bin string, env []string, args ...string) *exec.Cmd {
	groups := "--clear-groups"
	var gids []string
	for _, g := range id.groups {
		if gr, err := user.LookupGroup(g); err == nil {
			gids = append(gids, gr.Gid)
		}
	}
	if len(gids) > 0 {
		groups = "--groups=" + strings.Join(gids, ",")
	}
	// As the unit: no capabilities (CapabilityBoundingSet=), no new
	// privileges (NoNewPrivileges=yes).
	u := strconv.Itoa(id.uid)
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + u, "--regid=" + u, groups,
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", bin}, args...)...)
	cmd.Env = env
	cmd.Dir = filepath.Dir(bin)
	return cmd
}

// started is a process of the test, ended at cleanup by closing its stdin
// (and killed if it does not end).
func started(t *testing.T, cmd *exec.Cmd) (stdout *bufio.Scanner) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return bufio.NewScanner(out)
}

// line reads the next line of a child's stdout, within a bound.
func line(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		sc.Scan()
		got <- sc.Text()
	}()
	select {
	case l := <-got:
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("a child process said nothing for 20 s")
		return ""
	}
}

// daemonLog collects the daemon's JSON log lines.
type daemonLog struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *daemonLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			l.mu.Lock()
			l.lines = append(l.lines, m)
			l.mu.Unlock()
		}
	}
}

// with returns the lines whose message starts with msg, for server.
func (l *daemonLog) with(msg, server string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, m := range l.lines {
		if s, _ := m["msg"].(string); strings.HasPrefix(s, msg) && m["server"] == server {
			out = append(out, m)
		}
	}
	return out
}

// TestAttributionAsServiceUser runs the daemon as the unit runs it (a
// user of its own, the unit's groups, no capabilities) against inference
// servers of other users, real processes under the real /proc, with
// go-nvml's mock reporting each server's worker on a GPU.
func TestAttributionAsServiceUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("starting processes as other users (setpriv --reuid) needs root; CI runs the tests as root")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatal("setpriv (util-linux) is needed to run processes as other users:", err)
	}
	// The test binary, where the other users may run it.
	dir, err := os.MkdirTemp("", "tpsmon-attrib-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "agent.test")
	tpsmonbin.Install(t, self, bin)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	service := identity{uid: 64_100, groups: []string{"systemd-journal", "adm"}} // User=tpsmon
	llm := identity{uid: 64_101}                                                 // the servers' owner
	type srv struct {
		name      string
		as        identity
		namesPort bool // --port N on its command line
	}
	tests := []struct {
		name    string
		servers []srv
		// by: how each server is expected to be placed on its GPU; ""
		// means not placed, with why naming this text.
		by  map[string]string
		why string
	}{
		{
			name:    "another user's server naming its port",
			servers: []srv{{"vllm", llm, true}},
			by:      map[string]string{"vllm": "cmdline"},
		},
		{
			name:    "another user's only server, its port not on its command line",
			servers: []srv{{"llama", llm, false}},
			by:      map[string]string{"llama": "owner"},
		},
		{
			name:    "a server of the service's own user",
			servers: []srv{{"own", service, false}},
			by:      map[string]string{"own": "socket"},
		},
		{
			name:    "one other user, two servers, neither naming its port: not guessed",
			servers: []srv{{"a", llm, false}, {"b", llm, false}},
			by:      map[string]string{"a": "", "b": ""},
			why:     "permission denied",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var servers, onGPU []string
			for i, s := range tt.servers {
				port := loopback.FreePort(t)
				args := []string{"serve"}
				if s.namesPort {
					args = append(args, "--port", strconv.Itoa(port))
				}
				out := started(t, s.as.command(bin, []string{roleEnv + "=server", "TPSMON_TEST_PORT=" + strconv.Itoa(port)}, args...))
				pid, ok := strings.CutPrefix(line(t, out), "worker ")
				if !ok {
					t.Fatalf("server %s started no worker", s.name)
				}
				servers = append(servers, fmt.Sprintf("%s:%d", s.name, port))
				onGPU = append(onGPU, fmt.Sprintf("%d:%s", i, pid))
			}
			cmd := service.command(bin, []string{roleEnv + "=daemon", "TPSMON_TEST_SERVERS=" + strings.Join(servers, ","),
				"TPSMON_TEST_GPU_PIDS=" + strings.Join(onGPU, ",")}, "run")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			out := started(t, cmd)
			var log daemonLog
			go log.read(stderr)
			addr, ok := strings.CutPrefix(line(t, out), "listening ")
			if !ok {
				t.Fatal("the daemon did not say where it listens")
			}

			// Every server placed or said unplaced, then five more
			// rounds (every 200 ms, as the daemon gets to them) to see
			// it said once.
			said := func(name string) []map[string]any {
				if tt.by[name] == "" {
					return log.with("GPUs of a server not attributed", name)
				}
				return log.with("server placed on GPUs", name)
			}
			deadline := time.Now().Add(20 * time.Second)
			for _, s := range tt.servers {
				for len(said(s.name)) == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("nothing said about %s in 20 s", s.name)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			deadline = time.Now().Add(20 * time.Second)
			for seen := len(log.msgs(attribRound)); len(log.msgs(attribRound)) < seen+5; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d attribution rounds in 20 s", len(log.msgs(attribRound)))
				}
			}

			for i, s := range tt.servers {
				lines := said(s.name)
				if len(lines) != 1 {
					t.Errorf("%s: said %d times, want once: %v", s.name, len(lines), lines)
				}
				got := lines[0]
				t.Logf("%s: %s gpus=%v by=%v why=%v", s.name, got["msg"], got["gpus"], got["by"], got["why"])
				if by := tt.by[s.name]; by != "" {
					if want := fmt.Sprintf("GPU-test-%d", i); got["gpus"] != want || got["by"] != by {
						t.Errorf("%s placed on %v by %v, want %s by %s", s.name, got["gpus"], got["by"], want, by)
					}
					continue
				}
				if why, _ := got["why"].(string); !strings.Contains(why, tt.why) {
					t.Errorf("%s: why %q does not say %q", s.name, why, tt.why)
				}
				if n := len(log.with("server placed on GPUs", s.name)); n > 0 {
					t.Errorf("%s placed by a guess", s.name)
				}
			}

			resp, err := http.Get("http://" + addr + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var rep healthReport
			if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
				t.Fatal(err)
			}
			issues := strings.Join(rep.Issues, "\n")
			for _, s := range tt.servers {
				listed := strings.Contains(issues, "GPUs not attributed (gpus: auto): "+s.name+": ")
				if want := tt.by[s.name] == ""; listed != want {
					t.Errorf("%s on /readyz: %v, want %v; issues:\n%s", s.name, listed, want, issues)
				}
			}
		})
	}
}
