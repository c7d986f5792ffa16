// Package preflight is what `tpsmon check` probes: the configuration's
// GPUs, servers, logs, attribution, sinks and InfluxDB, as the service
// will meet them, with one line per probe.
package preflight

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/gpumap"
	"github.com/tpsmon/tpsmon/daemon/agent"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/modelfacts"
	"github.com/tpsmon/tpsmon/internal/logging"
	"github.com/tpsmon/tpsmon/internal/redact"
	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/otlp"
)

// Run probes everything the daemon needs, writing one line per probe to w,
// and returns the number of problems found. version names tpsmon to
// InfluxDB.
func Run(ctx context.Context, cfg *config.Config, version string, w io.Writer) int {
	c := &checker{w: w, version: version}
	gpus, specs := c.gpuBackend(cfg)
	client := collector.NewClient(5 * time.Second) // follows no redirect, as the daemon
	servers := cfg.Servers
	if len(servers) == 0 && cfg.Discovery.Enabled {
		servers = agent.Discover(ctx, client, cfg.Discovery.Ports, logging.Quiet())
		if len(servers) == 0 {
			c.report(fmt.Errorf("servers: none configured and none found on ports %v", cfg.Discovery.Ports), "")
		}
	}
	for _, s := range servers {
		c.serverLog(s)
		facts := c.serverMetrics(ctx, client, s)
		c.ceiling(s, specs, logFacts(s, facts))
	}
	c.problems += checkAttribution(w, servers, gpus)
	if cfg.Sink.OTLP.Endpoint != "" {
		c.otlp(ctx, cfg)
	}
	switch {
	case cfg.Sink.Influx.URL != "":
		c.influx(ctx, cfg)
	case cfg.Sink.OTLP.Endpoint != "" && cfg.Sink.File.Path == config.NoFileSink:
		c.report(spoolWritable(cfg.Sink.Spool.Dir), "spool %s writable", cfg.Sink.Spool.Dir)
	default:
		c.fileSink(cfg)
	}
	return c.problems
}

// otlp checks that the OTLP receiver answers and takes the headers: an
// export of no points.
func (c *checker) otlp(ctx context.Context, cfg *config.Config) {
	w, err := cfg.OTLPClient("tpsmon/" + c.version)
	if err != nil {
		c.report(fmt.Errorf("sink.otlp: %w", err), "")
		return
	}
	defer w.Close()
	u, _ := otlp.EndpointURL(cfg.Sink.OTLP.Endpoint)
	c.report(w.Probe(ctx), "otlp %s: reachable, an empty export accepted", redact.URL(u))
}

// checker writes one line per probe and counts the failed ones.
type checker struct {
	w        io.Writer
	version  string
	problems int
}

// report says FAIL with err, or ok with okMsg formatted with args.
func (c *checker) report(err error, okMsg string, args ...any) {
	if err != nil {
		c.problems++
		fmt.Fprintf(c.w, "FAIL  %s\n", redact.Text(err.Error()))
		return
	}
	fmt.Fprintf(c.w, "%s", redact.Text(fmt.Sprintf("ok    "+okMsg+"\n", args...)))
}

// gpuBackend opens the configured backend once and returns the GPUs it
// samples with the processes on each, for attribution, and their peaks
// (the decode ceiling's), noting what the table and NVML disagree on.
func (c *checker) gpuBackend(cfg *config.Config) ([]gpumap.GPU, map[string]roofline.Spec) {
	open := agent.OpenBackend(cfg, nil)
	if open == nil {
		c.report(nil, "gpu backend none: GPUs are not sampled")
		return nil, nil
	}
	g, err := open()
	if err != nil {
		c.report(fmt.Errorf("gpu backend %s: %w", cfg.GPU.Backend, err), "")
		return nil, nil
	}
	smp := g.Sample(time.Now())
	n := len(smp)
	gpus := gpusWithProcesses(g, smp)
	var specs map[string]roofline.Spec
	if df, ok := g.(interface{ Facts() []sample.Device }); ok {
		var notes []string
		specs, notes = modelfacts.GPUs(df.Facts())
		for _, n := range notes {
			fmt.Fprintf(c.w, "note  %s\n", n)
		}
	}
	g.Close()
	c.report(nil, "gpu backend %s: %d GPUs", cfg.GPU.Backend, n)
	return gpus, specs
}

// ceiling says whether the server's windows will carry the decode ceiling
// (mbu, ceiling_tps), and which fact is missing where not. A model file
// configured but unreadable fails; one not configured is a note.
func (c *checker) ceiling(s config.ServerConfig, specs map[string]roofline.Spec, engine collector.EngineFacts) {
	r, src, err := modelfacts.WithEngine(s, engine)
	switch {
	case errors.Is(err, modelfacts.ErrNoModel) && s.ModelFile == "":
		fmt.Fprintf(c.w, "note  server %s: no decode ceiling (mbu, ceiling_tps): %v\n", s.Name, err)
		return
	case err != nil:
		c.report(fmt.Errorf("server %s: model_file: %w", s.Name, err), "")
		return
	}
	peak := fmt.Sprintf("peak %.0f GB/s (%s)", r.GPU.PeakBWGBps, r.GPU.Source)
	if r.GPU.PeakBWGBps == 0 {
		var names []string
		for _, l := range s.GPUs {
			if sp, ok := specs[l]; ok {
				names = append(names, fmt.Sprintf("GPU %s %s %.0f GB/s", l, sp.Name, sp.BWGBps))
			}
		}
		if len(specs) == 0 {
			fmt.Fprintf(c.w, "note  server %s: no decode ceiling (mbu, ceiling_tps): no GPU peak (no GPU with a known peak; set servers[].roofline.gpu or peak_bw_gbps)\n", s.Name)
			return
		}
		peak = "peaks of its GPUs"
		if len(names) > 0 {
			peak += ": " + strings.Join(names, ", ")
		}
	}
	kv := "KV counted from its occupancy"
	if r.KVTokens == 0 || !r.Model.HasKV() {
		kv = "KV not counted (give servers[].roofline.kv_tokens): the ceiling is an upper bound"
	}
	from := s.ModelFile
	switch {
	case from == "" && s.Roofline.ParamsB == 0:
		from = src // the engine's model
	case from == "":
		from = "servers[].roofline"
	}
	if strings.Contains(src, "the engine") && from != src {
		from += " (" + src + ")"
	}
	c.report(nil, "server %s: decode ceiling from %s (%.3g parameters streamed, %.3g GB), %s; %s", s.Name, from,
		r.Model.Params, modelBytes(r.Model)/1e9, peak, kv)
}

// maxLogHead is how much of a server's log check reads for the engine's
// start-up lines (vLLM's weights and KV capacity, the model vLLM or
// SGLang loads).
const maxLogHead = 4 << 20

// logFacts adds what the start of server s's log file says of the model
// to what its metrics endpoint said.
func logFacts(s config.ServerConfig, f collector.EngineFacts) collector.EngineFacts {
	if s.Log.File == "" {
		return f
	}
	file, err := os.Open(s.Log.File)
	if err != nil {
		return f // serverLog has said so
	}
	defer file.Close()
	sc := bufio.NewScanner(io.LimitReader(file, maxLogHead))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line collector.EngineFacts
		if collector.VLLMFactLine(sc.Text(), &line) {
			if line.KVTokens > 0 {
				f.KVTokens, f.KVTokensFrom = line.KVTokens, line.KVTokensFrom
			}
			if line.WeightBytesPerGPU > 0 {
				f.WeightBytesPerGPU = line.WeightBytesPerGPU
			}
			if line.LoggedModel != "" {
				f.LoggedModel, f.LoggedModelFrom, f.LoggedRevision, f.LoggedDownloadDir =
					line.LoggedModel, line.LoggedModelFrom, line.LoggedRevision, line.LoggedDownloadDir
			}
		}
	}
	return f
}

func modelBytes(m roofline.Model) float64 {
	if m.WeightBytes > 0 {
		return m.WeightBytes
	}
	return m.Params * m.BytesPerWeight
}

// serverLog checks that the server's log file or journal can be read.
func (c *checker) serverLog(s config.ServerConfig) {
	switch {
	case s.Log.File != "":
		f, err := os.Open(s.Log.File)
		if err == nil {
			f.Close()
		} else {
			err = fmt.Errorf("server %s: log unreadable: %w", s.Name, err)
		}
		c.report(err, "server %s: log %s readable", s.Name, s.Log.File)
	case s.Log.JournalUnit != "":
		_, err := exec.LookPath("journalctl")
		if err != nil {
			err = fmt.Errorf("server %s: journal_unit %s needs journalctl: %w", s.Name, s.Log.JournalUnit, err)
		} else if err = journalReadable(s.Log.JournalUnit); err != nil {
			err = fmt.Errorf("server %s: %w", s.Name, err)
		}
		c.report(err, "server %s: journal of %s readable (journalctl -o json, no libsystemd needed)", s.Name, s.Log.JournalUnit)
	}
}

// serverMetrics scrapes the server's metrics once, where it has any, and
// returns what the engine said of its model with them.
func (c *checker) serverMetrics(ctx context.Context, client *http.Client, s config.ServerConfig) collector.EngineFacts {
	if s.MetricsURL == "" {
		return collector.EngineFacts{}
	}
	d, err := collector.DialectFor(s.Engine)
	if err != nil {
		c.report(fmt.Errorf("server %s: %w", s.Name, err), "")
		return collector.EngineFacts{}
	}
	sc := &collector.Scraper{Server: s.Name, URL: s.MetricsURL, Interval: time.Second, Dialect: d, Client: client}
	r := sc.Scrape(ctx)
	c.report(r.Err, "server %s: %s metrics at %s (model %q)", s.Name, r.Sample.Engine, redact.URL(s.MetricsURL), r.Sample.Model)
	if r.Facts == nil {
		return collector.EngineFacts{}
	}
	return *r.Facts
}

// fileSink checks where points go without InfluxDB.
func (c *checker) fileSink(cfg *config.Config) {
	switch cfg.Sink.File.Path {
	case config.NoFileSink:
		c.report(errors.New("sink: no InfluxDB configured (sink.influx.url) and sink.file.path is none: points are written nowhere"), "")
	case "-", "":
		c.report(nil, "influx: none configured; points go to stdout")
	default:
		err := fileSinkWritable(cfg.Sink.File.Path)
		if err == nil && AsService() && !underStateDir(cfg.Sink.File.Path) {
			err = fmt.Errorf("sink.file.path %s: tpsmon.service may write only under %s (ProtectSystem=strict); the service would not start", cfg.Sink.File.Path, stateDir)
		}
		c.report(err, "influx: none configured; points go to %s (writable)", cfg.Sink.File.Path)
	}
}

// influx checks the token, that InfluxDB answers and takes it, and the
// spool behind it.
func (c *checker) influx(ctx context.Context, cfg *config.Config) {
	switch tokenFrom(cfg) {
	case "":
		fmt.Fprintf(c.w, "note  influx token: none (sink.influx.token_file is empty and there is no credential %s): writes go unauthenticated\n", credentialSource)
	case "credential":
		fmt.Fprintf(c.w, "ok    influx token: the influx-token credential (LoadCredential= from %s)\n", credentialSource)
	default:
		c.report(tokenFileMode(cfg), "influx token file %s: readable here, not by other users", cfg.Sink.Influx.TokenFile)
	}
	// The probe writes nothing, so there is nothing to compress.
	probe := *cfg
	probe.Sink.Influx.GZip = false
	in, err := probe.InfluxClient("tpsmon/" + c.version)
	if err != nil {
		c.report(err, "")
		return
	}
	defer in.Close()
	if err := in.Ping(ctx); err != nil {
		c.report(err, "")
		return
	}
	c.report(probeError(in.Probe(ctx), cfg), "influx %s: reachable, token and bucket %q accepted", redact.URL(cfg.Sink.Influx.URL), cfg.Sink.Influx.Bucket)
	if _, err := os.Stat(stateDir); AsService() && errors.Is(err, os.ErrNotExist) && underStateDir(cfg.Sink.Spool.Dir) {
		fmt.Fprintf(c.w, "ok    spool %s: systemd creates %s for the service (StateDirectory=)\n", cfg.Sink.Spool.Dir, stateDir)
	} else {
		c.report(spoolWritable(cfg.Sink.Spool.Dir), "spool %s writable", cfg.Sink.Spool.Dir)
	}
}

// gpusWithProcesses lists the GPUs sampled with the processes NVML sees
// on each, where the backend can tell.
func gpusWithProcesses(g agent.GPUSampler, smp []sample.GPU) []gpumap.GPU {
	l, ok := g.(interface{ Processes() map[string][]int })
	if !ok {
		return nil
	}
	procs := l.Processes()
	var out []gpumap.GPU
	for _, s := range smp {
		if s.Instance == "" {
			out = append(out, gpumap.GPU{Index: s.Index, UUID: s.UUID, PIDs: procs[s.UUID]})
		}
	}
	return out
}

// checkAttribution finds the servers with gpus: auto as the daemon does,
// as this user (the service user when root runs check), and returns the
// problems: a server whose GPUs cannot be told is one.
func checkAttribution(w io.Writer, servers []config.ServerConfig, gpus []gpumap.GPU) int {
	auto := agent.AutoServers(servers)
	if len(auto) == 0 {
		return 0
	}
	res, err := gpumap.Resolve("/proc", auto, gpus)
	if err != nil {
		fmt.Fprintf(w, "FAIL  attribution: %v\n", err)
		return 1
	}
	problems := 0
	for _, s := range auto {
		pl, placed := res.Placed[s.Name]
		why, unplaced := res.Unplaced[s.Name]
		switch {
		case placed:
			on := "no GPU process of it seen now"
			if len(pl.GPUs) > 0 {
				on = "on " + strings.Join(pl.GPUs, ", ")
			}
			fmt.Fprintf(w, "ok    attribution %s: port %d served by pid %d (found by %s), %s\n", s.Name, s.Port, pl.PID, pl.By, on)
		case unplaced:
			problems++
			fmt.Fprintf(w, "FAIL  attribution %s: its GPUs cannot be told: %s; list them in gpus:\n", s.Name, why)
		default:
			fmt.Fprintf(w, "note  attribution %s: not placed now: nothing listens on port %d, or only its GPU processes can tell and NVML lists none\n",
				s.Name, s.Port)
		}
	}
	return problems
}

// probeError explains a refused write of nothing.
func probeError(err error, cfg *config.Config) error {
	var we *sink.WriteError
	if !errors.As(err, &we) {
		return err
	}
	switch we.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		if tokenFrom(cfg) == "" {
			return fmt.Errorf("influx %s: authentication required (HTTP %d) and no token was sent: put it in %s", cfg.Sink.Influx.URL, we.Status, credentialSource)
		}
		return fmt.Errorf("influx %s: the token is refused (HTTP %d); check sink.influx.token_file", cfg.Sink.Influx.URL, we.Status)
	case http.StatusNotFound:
		return fmt.Errorf("influx %s: bucket %q does not exist (HTTP 404)", cfg.Sink.Influx.URL, cfg.Sink.Influx.Bucket)
	}
	return err
}

// tokenFrom says where the token comes from: "" (nowhere), "credential"
// ($CREDENTIALS_DIRECTORY/influx-token) or "file" (sink.influx.token_file).
func tokenFrom(cfg *config.Config) string {
	if cfg.Sink.Influx.TokenFile != "" {
		return "file"
	}
	if dir := os.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "influx-token")); err == nil {
			return "credential"
		}
	}
	return ""
}

// tokenFileMode refuses a token file that other users can read or write.
func tokenFileMode(cfg *config.Config) error {
	path := cfg.Sink.Influx.TokenFile
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("sink.influx.token_file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("sink.influx.token_file %s is not a regular file (mode %v)", path, fi.Mode())
	}
	if m := fi.Mode().Perm(); m&0o006 != 0 {
		return fmt.Errorf("sink.influx.token_file %s is readable or writable by every user (mode %04o): chmod 600 it", path, m)
	}
	return nil
}

// fileSinkWritable opens the file sink for appending, as the daemon does.
func fileSinkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("sink.file.path: %w", err)
	}
	return f.Close()
}

// spoolWritable checks the spool directory as the daemon does (tpsmon's
// own, statefile.EnsureDir), then creates and removes a file in it.
func spoolWritable(dir string) error {
	if err := statefile.EnsureDir(dir); err != nil {
		return fmt.Errorf("sink.spool.dir: %w", err)
	}
	f, err := os.CreateTemp(dir, ".check-*")
	if err != nil {
		return fmt.Errorf("sink.spool.dir: %w", err)
	}
	f.Close()
	return os.Remove(f.Name())
}
