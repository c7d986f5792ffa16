package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/testkit/tpsmonbin"
)

// runCLI runs tpsmon in-process with args and returns its output and error.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	if len(args) > 0 && args[0] == "check" {
		// In-process: as root (CI), checking again as the service user
		// would run this test binary.
		args = append(args, "--as-root")
	}
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func TestConfigErrorsNameWhatIsWrong(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string // substrings of the one-line error
	}{
		{"unknown key", []string{"run", "-c", "testdata/unknown_key.yaml"}, nil, []string{"timout"}},
		{"bare number duration", []string{"run", "-c", "testdata/bare_duration.yaml"}, nil, []string{"window", "no unit"}},
		{"missing explicit file", []string{"run", "-c", "testdata/nope.yaml"}, nil, []string{"testdata/nope.yaml"}},
		{"unreadable token file", []string{"run", "-c", "testdata/bad_token.yaml"}, nil, []string{"token_file", "no-such-token"}},
		{"bad backend from env", []string{"run", "-c", "testdata/good.yaml"}, map[string]string{"TPSMON_GPU_BACKEND": "cuda"}, []string{"gpu.backend", "cuda"}},
		{"bad flag value", []string{"run", "-c", "testdata/good.yaml", "--window", "50ms"}, nil, []string{"window", "too short"}},
		// replay takes the daemon's bounds: a 1 ms window over a day's log
		// would write 86 million windows.
		{"replay window too short", []string{"replay", "--log", "testdata/replay/vllm_edges.log", "--window", "1ms"}, nil, []string{"--window 1ms", "too short", "at least 100ms"}},
		{"replay window too long", []string{"replay", "--log", "testdata/replay/vllm_edges.log", "--window", "2h"}, nil, []string{"--window 2h0m0s", "too long", "at most 1h0m0s"}},
		{"replay year out of range", []string{"replay", "--log", "testdata/replay/vllm_edges.log", "--year", "99999"}, nil, []string{"--year 99999", "1678 to 2261"}},
		{"replay year before", []string{"replay", "--log", "testdata/replay/vllm_edges.log", "--year", "1500"}, nil, []string{"--year 1500", "1678 to 2261"}},
		{"replay window negative", []string{"replay", "--log", "testdata/replay/vllm_edges.log", "--window", "-10s"}, nil, []string{"--window -10s", "too short"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := runCLI(t, tt.args...)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
		})
	}
}

func TestConfigLayers(t *testing.T) {
	t.Setenv("TPSMON_SINK_INFLUX_URL", "http://127.0.0.1:8086")
	t.Setenv("TPSMON_GRACE", "2s")
	root := newRunCmd()
	if err := root.Flags().Parse([]string{"--window", "20s"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load("testdata/good.yaml", true, root.Flags())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Window != 20*time.Second || cfg.Grace != 2*time.Second || cfg.Host != "node-a" {
		t.Errorf("window %v grace %v host %q: flag, env and file layers not applied", cfg.Window, cfg.Grace, cfg.Host)
	}
	if cfg.Sink.Influx.URL != "http://127.0.0.1:8086" || cfg.Sink.Influx.Bucket != "tpsmon" {
		t.Errorf("influx %+v", cfg.Sink.Influx)
	}
	s := cfg.Servers[0]
	if s.Name != "llama-70b" || s.ScrapeInterval != 2*time.Second || strings.Join(s.GPUs, ",") != "0,1" {
		t.Errorf("server %+v", s)
	}
	if cfg.Sink.Spool.MaxBytes != 512<<20 {
		t.Errorf("max_bytes %d", cfg.Sink.Spool.MaxBytes)
	}
}

func TestCheckReportsUnreachableServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tpsmon.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`gpu: {backend: none}
servers:
  - name: gone
    metrics_url: http://%s/metrics
`, addr)), 0o600)
	out, err := runCLI(t, "check", "-c", cfgPath)
	if err == nil || !strings.Contains(err.Error(), "1 problem") {
		t.Fatalf("check err = %v, want one problem", err)
	}
	if !strings.Contains(out, "FAIL  scrape gone (http://"+addr+"/metrics)") || !strings.Contains(out, "refused") {
		t.Errorf("check output does not name the server and the cause:\n%s", out)
	}
}

func TestCheckAllWell(t *testing.T) {
	srv := httptest.NewServer(&vllmsim.Driven{Rate: 10, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	defer srv.Close()
	cfgPath := filepath.Join(t.TempDir(), "tpsmon.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf("gpu: {backend: sim}\nservers:\n  - name: ok\n    metrics_url: %s/metrics\n", srv.URL)), 0o600)
	out, err := runCLI(t, "check", "-c", cfgPath)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, out)
	}
	if !strings.Contains(out, `ok    server ok: vllm metrics`) || !strings.Contains(out, "test/model") {
		t.Errorf("check output:\n%s", out)
	}
}

func TestBinaryExitStatus(t *testing.T) {
	t.Parallel()
	bin := tpsmonbin.Path(t)
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "tpsmon "+tpsmonbin.Version) {
		t.Errorf("version: %q %v", out, err)
	}
	for _, flag := range []string{"--version", "-v"} {
		if o, err := exec.Command(bin, flag).Output(); err != nil || string(o) != string(out) {
			t.Errorf("%s: %q %v, want %q", flag, o, err, out)
		}
	}
	cmd := exec.Command(bin, "run", "-c", "testdata/unknown_key.yaml")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1", err)
	}
	msg := strings.TrimSuffix(stderr.String(), "\n")
	if !strings.HasPrefix(msg, "tpsmon: config") || strings.Contains(msg, "\n") {
		t.Errorf("stderr %q, want one line starting with \"tpsmon: config\"", stderr.String())
	}
}

func TestCheckInflux(t *testing.T) {
	srv := influxtest.Start(t, "INFLUXDB_HTTP_AUTH_ENABLED=true")
	// The first user may be created without credentials.
	influxtest.Query(t, srv.URL, "", "CREATE USER admin WITH PASSWORD 'pw' WITH ALL PRIVILEGES")
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/query?q=CREATE+DATABASE+checkdb", nil)
	req.SetBasicAuth("admin", "pw")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	vllm := httptest.NewServer(&vllmsim.Driven{Rate: 10, Start: time.Now(), ResetAt: time.Now().Add(time.Hour)})
	defer vllm.Close()
	dir := t.TempDir()
	token := func(name, tok string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(tok+"\n"), mode)
		os.Chmod(p, mode)
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// A spool directory every user can write into (one they may have
	// filled): refused, as the daemon refuses it.
	shared := filepath.Join(dir, "shared")
	os.Mkdir(shared, 0o700)
	os.Chmod(shared, 0o777|os.ModeSticky)
	tests := []struct {
		name      string
		tokenFile string
		bucket    string
		spool     string // "": dir/spool
		want      []string
		problems  int
	}{
		{"all well", token("good", "admin:pw", 0o600), "checkdb", "", []string{"token and bucket \"checkdb\" accepted", "spool"}, 0},
		{"token refused", token("bad", "admin:nope", 0o600), "checkdb", "", []string{"the token is refused (HTTP 401)"}, 1},
		{"no such bucket", token("good2", "admin:pw", 0o600), "nodb", "", []string{`bucket "nodb" does not exist`}, 1},
		{"world-readable token", token("open", "admin:pw", 0o644), "checkdb", "", []string{"readable or writable by every user (mode 0644)"}, 1},
		{"token file a FIFO", fifo, "checkdb", "", []string{fifo + " is a named pipe (FIFO), not a regular file"}, 2},
		{"spool shared by every user", token("good3", "admin:pw", 0o600), "checkdb", shared,
			[]string{shared + " (owner uid", "mode 1777", "other users can write into it"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfgPath := filepath.Join(dir, tt.name+".yaml")
			os.WriteFile(cfgPath, []byte(fmt.Sprintf(`gpu: {backend: none}
servers: [{name: s, metrics_url: "%s"}]
sink:
  influx: {url: "%s", bucket: %s, token_file: "%s"}
  spool: {dir: "%s"}
`, vllm.URL, srv.URL, tt.bucket, tt.tokenFile, cmp.Or(tt.spool, filepath.Join(dir, "spool")))), 0o600)
			out, err := runCLI(t, "check", "-c", cfgPath)
			if (tt.problems == 0) != (err == nil) {
				t.Errorf("check err = %v\n%s", err, out)
			}
			if tt.problems > 0 && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d problem", tt.problems))) {
				t.Errorf("check err = %v, want %d problem(s)", err, tt.problems)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("check output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestReportCommand(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "reportcmd")
	// An hour of one server that idles on one of its two GPUs.
	cfg := configtest.Private(t)
	cfg.Window = time.Minute
	cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket = base, db
	now := time.Now().UTC().Truncate(time.Minute)
	var lines bytes.Buffer
	for i := 1; i <= 60; i++ {
		ts := now.Add(-time.Duration(i) * time.Minute).UnixMilli()
		fmt.Fprintf(&lines, "tpsmon_server,gpus=0\\,1,host=n1,server=s1 coverage=1,state=\"underutilized\",system_tps=50,tokens=3000i,tps_per_gpu=25,energy_j=6000,gpu_util=20 %d\n", ts)
		fmt.Fprintf(&lines, "tpsmon_gpu,gpu=1,host=n1,server=s1,uuid=U1 util=0.5,coverage=1 %d\n", ts)
	}
	deliver(t, cfg, lines.Bytes())
	dir := t.TempDir()
	html := filepath.Join(dir, "r.html")
	if _, err := runCLI(t, "report", "-c", "testdata/nope-default.yaml", "--influx-url", base, "--bucket", db, "--since", "2h", "--output", html); err == nil || !strings.Contains(err.Error(), "nope-default") {
		t.Errorf("missing explicit config: %v", err)
	}
	cfgPath := filepath.Join(dir, "c.yaml")
	// The configuration's window is not the data's: the report reads the
	// data's (one minute, from the points' spacing).
	os.WriteFile(cfgPath, []byte("window: 10s\n"), 0o600)
	if msg, err := runCLI(t, "report", "-c", cfgPath, "--influx-url", base, "--bucket", db, "--since", "2h", "--output", html); err != nil {
		t.Fatalf("report: %v\n%s", err, msg)
	}
	b, _ := os.ReadFile(html)
	if !strings.Contains(string(b), "gpu 1 (U1) on n1 was idle 100% of 1.0 h; it serves s1") || !strings.Contains(string(b), "<svg") {
		t.Errorf("report lacks the finding or charts")
	}
	js, err := runCLI(t, "report", "-c", cfgPath, "--influx-url", base, "--bucket", db, "--since", "2h", "--format", "json", "--price", "*=2")
	if err != nil || !strings.Contains(js, `"server s1 on n1 was underutilized 100% of the time`) {
		t.Errorf("json report: %v\n%.500s", err, js)
	}
	var r struct {
		States []struct {
			State    string
			GPUHours float64 `json:"gpu_hours"`
		} `json:"gpu_hours_by_state"`
		Cost float64
	}
	if err := json.Unmarshal([]byte(js[strings.Index(js, "{"):]), &r); err != nil {
		t.Fatalf("json report: %v", err)
	}
	// 60 one-minute windows of a server on 2 GPUs; GPU 1 is priced at 2 for its hour.
	if len(r.States) != 1 || r.States[0].State != "underutilized" || r.States[0].GPUHours != 2 || r.Cost != 2 {
		t.Errorf("GPU-hours by state %+v, cost %v: want underutilized 2 GPU-hours, cost 2", r.States, r.Cost)
	}
}

func TestRollupCommand(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "rollupcmd")
	for _, rp := range []string{"tpsmon_1h", "tpsmon_1d"} {
		influxtest.Query(t, base, db, fmt.Sprintf(`CREATE RETENTION POLICY "%s" ON "%s" DURATION 400d REPLICATION 1`, rp, db))
	}
	// Three hours of 10-second windows, ending two hours ago.
	end := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	var lines bytes.Buffer
	for ts := end.Add(-3 * time.Hour); ts.Before(end); ts = ts.Add(10 * time.Second) {
		fmt.Fprintf(&lines, "tpsmon_server,gpus=0,host=n1,server=s1 coverage=1,state=\"ok\",tokens=100i,window_s=10 %d\n", ts.UnixMilli())
	}
	resp, err := http.Post(base+"/write?precision=ms&db="+db, "text/plain", &lines)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: %v %v", err, resp)
	}
	resp.Body.Close()
	for i := 0; i < 2; i++ {
		out, err := runCLI(t, "rollup", "-c", "testdata/good.yaml", "--influx-url", base, "--bucket", db+"/autogen")
		if err != nil {
			t.Fatalf("rollup: %v\n%s", err, out)
		}
		if !strings.Contains(out, "1h: ") || !strings.Contains(out, "1d: ") {
			t.Errorf("rollup output:\n%s", out)
		}
	}
	s := influxtest.Query(t, base, db, `SELECT sum("tokens"), sum("ok_seconds"), count("windows") FROM "tpsmon_1h"."tpsmon_server_1h"`)
	if len(s) != 1 || fmt.Sprint(s[0].Values[0][1:]) != "[108000 10800 3]" {
		t.Errorf("hourly rollups after two runs: %v, want 108000 tokens, 10800 s in 3 hours", s)
	}
}

// deliver writes line protocol through a spool and its sender into the
// configured InfluxDB, as the daemon does.
func deliver(t *testing.T, cfg *config.Config, lp []byte) {
	t.Helper()
	in, err := cfg.InfluxClient("tpsmon/test")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	sp, err := spool.Open(spool.Options{Dir: cfg.Sink.Spool.Dir, MaxBytes: int64(cfg.Sink.Spool.MaxBytes)})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := sp.Append(lp); err != nil {
		t.Fatal(err)
	}
	if err := (&sink.Sender{Spool: sp, W: in}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestRunOncePrintsTheFirstWindowAndWritesNothing(t *testing.T) {
	// An InfluxDB that counts writes: --once must send it nothing.
	writes := 0
	influx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writes++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer influx.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "tpsmon.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf(`window: 1s
grace: 100ms
gpu: {backend: sim, interval: 100ms, sim_gpus: 3}
discovery: {enabled: false}
sink:
  influx: {url: %s, bucket: tpsmon}
  spool: {dir: %s}
`, influx.URL, filepath.Join(dir, "spool"))), 0o600)
	// A daemon holds the state directory: --once keeps no state, so it
	// neither needs nor takes its lock.
	os.Mkdir(filepath.Join(dir, "spool"), 0o700)
	held, err := statefile.Lock(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	out, err := runCLI(t, "run", "--once", "-c", cfgPath)
	if err != nil {
		t.Fatalf("run --once: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want the 3 GPUs of one window:\n%s", len(lines), out)
	}
	ts := ""
	for _, l := range lines {
		stamp := l[strings.LastIndex(l, " ")+1:]
		if !strings.HasPrefix(l, "tpsmon_gpu,") || (ts != "" && stamp != ts) {
			t.Errorf("not a point of the one window: %q", l)
		}
		ts = stamp
	}
	if writes != 0 {
		t.Errorf("--once wrote to InfluxDB %d times", writes)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "spool")); len(left) != 1 || left[0].Name() != statefile.LockName {
		t.Errorf("--once left state behind: %v", left)
	}
}

// TestLinkerDropsUnusedMethods: nothing tpsmon runs calls methods by a
// name known only at run time (text/template's Execute, which html/template
// and cobra's --version template use): the linker would then keep every
// exported method of every type, and the binary, whose touched pages are
// most of the daemon's RSS, would grow by a fifth (20.3 MB of text and
// read-only data against 16.0).
func TestLinkerDropsUnusedMethods(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "tool", "nm", tpsmonbin.Path(t)).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	if sym := "text/template.(*state).evalField"; bytes.Contains(out, []byte(" "+sym+"\n")) {
		t.Errorf("tpsmon links %s: a template is executed somewhere, and every exported method stays in the binary", sym)
	}
}
