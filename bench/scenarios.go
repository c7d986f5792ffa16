package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/sim/vllmsim"
)

// page adds to a simulated server's metrics what a real one shows beside
// them: per-request histograms with their buckets, Python's own series.
func page(base http.Handler, prefix string, histograms int) http.Handler {
	var extra strings.Builder
	// The first are the latency histograms tpsmon reads (vLLM's names),
	// the rest others it skips.
	real := []string{"time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
		"request_time_per_output_token_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"}
	for i := range histograms {
		name := fmt.Sprintf("%srequest_histogram_%d_seconds", prefix, i)
		if i < len(real) && prefix == "vllm:" {
			name = prefix + real[i]
		}
		fmt.Fprintf(&extra, "# HELP %s Histogram %d.\n# TYPE %s histogram\n", name, i, name)
		for _, le := range []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"} {
			fmt.Fprintf(&extra, "%s_bucket{le=%q,model_name=\"m\"} %d\n", name, le, 100*i)
		}
		fmt.Fprintf(&extra, "%s_sum{model_name=\"m\"} %d.5\n%s_count{model_name=\"m\"} %d\n", name, 9*i, name, 100*i)
	}
	for g := range 3 {
		fmt.Fprintf(&extra, "python_gc_objects_collected_total{generation=\"%d\"} %d.0\n", g, 1000*g)
	}
	text := extra.String()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base.ServeHTTP(w, r)
		w.Write([]byte(text))
	})
}

// sglangPage serves an SGLang-format page whose counters move.
func sglangPage(start time.Time) http.Handler {
	hist := page(http.NotFoundHandler(), "sglang:", 0)
	_ = hist
	return page(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := time.Since(start).Seconds()
		fmt.Fprintf(w, `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen",tp_rank="0"} 24
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen",tp_rank="0"} 2
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen",tp_rank="0"} 0.6
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="qwen",tp_rank="0"} 1200.0
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{mode="decode",model_name="qwen",tp_rank="0"} %.0f
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen"} %.0f
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} %.0f
`, 1200*s, 1200*s, 3600*s)
	}), "sglang:", 8)
}

// serve starts the endpoints on loopback: /vllm, /sglang and /vllm/N.
func (h *harness) serve(vllmServers int) string {
	start := time.Now()
	load := func(time.Time) float64 { return 0.7 }
	mux := http.NewServeMux()
	for i := range max(1, vllmServers) {
		sim := &vllmsim.Server{Model: "llama", SoloTPS: 80, MaxBatch: 32, Load: load}
		mux.Handle(fmt.Sprintf("/vllm/%d", i), page(sim, "vllm:", 10))
	}
	mux.Handle("/vllm", page(&vllmsim.Server{Model: "llama", SoloTPS: 80, MaxBatch: 32, Load: load}, "vllm:", 10))
	mux.Handle("/sglang", sglangPage(start))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	h.stops = append(h.stops, func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func vllmLine(t time.Time, gen float64) string {
	return fmt.Sprintf("(APIServer pid=1) INFO %s [loggers.py:271] Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: 24 reqs, Waiting: 1 reqs, GPU KV cache usage: 61.2%%, Prefix cache hit rate: 12.0%%\n",
		t.Format("01-02 15:04:05"), 3*gen, gen)
}

func llamaLine(task int) string {
	return fmt.Sprintf("slot print_timing: id  %d | task %d |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)\n", task%4, task)
}

// writeEverySecond appends a vLLM stat line to path each second until ctx ends.
func writeEverySecond(ctx context.Context, path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f.WriteString(vllmLine(now, 900))
		}
	}
}

// nvidiaSMI writes a stand-in nvidia-smi that prints an 8-GPU `-q -x`
// document made from the A100 capture in Telegraf's own test data.
func (h *harness) nvidiaSMI() (string, error) {
	src := filepath.Join(goEnv("GOMODCACHE"), "github.com/influxdata/telegraf@v1.37.2/plugins/inputs/nvidia_smi/testdata/a100-sxm4-v12.xml")
	b, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("telegraf's A100 capture: %w", err)
	}
	doc := string(b)
	i, j := strings.Index(doc, "<gpu "), strings.LastIndex(doc, "</gpu>")+len("</gpu>")
	if i < 0 || j < i {
		return "", fmt.Errorf("no <gpu> element in %s", src)
	}
	gpu := doc[i:j]
	var gpus strings.Builder
	uuid := regexp.MustCompile(`<uuid>[^<]*</uuid>`)
	minor := regexp.MustCompile(`<minor_number>[^<]*</minor_number>`)
	for n := range 8 {
		g := uuid.ReplaceAllString(gpu, fmt.Sprintf("<uuid>GPU-00000000-0000-0000-0000-00000000000%d</uuid>", n))
		g = minor.ReplaceAllString(g, fmt.Sprintf("<minor_number>%d</minor_number>", n))
		g = strings.Replace(g, `id="00000000:01:00.0"`, fmt.Sprintf(`id="00000000:%02X:00.0"`, n+1), 1)
		gpus.WriteString(g + "\n")
	}
	doc = doc[:i] + gpus.String() + doc[j:]
	doc = regexp.MustCompile(`<attached_gpus>\d+</attached_gpus>`).ReplaceAllString(doc, "<attached_gpus>8</attached_gpus>")
	dir := filepath.Join(h.work, "nvidia")
	os.MkdirAll(dir, 0o755)
	xml := filepath.Join(dir, "nvidia-smi.xml")
	if err := os.WriteFile(xml, []byte(doc), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nvidia-smi")
	return bin, os.WriteFile(bin, []byte("#!/bin/sh\ncat "+xml+"\n"), 0o755)
}

func (h *harness) createDB(name string) {
	if _, err := h.query("", "CREATE DATABASE "+name); err != nil {
		log.Fatal(err)
	}
}

type side struct {
	name   string
	u      usage
	points int
	// steady is the CPU after the first warmUp, over the rest of the run:
	// what the daemon costs once started, as it will for weeks.
	steady time.Duration
	// steadySelf leaves out the programs the daemon ran.
	steadySelf time.Duration
	span       time.Duration
	// floor is the steady CPU of bench/floor, run beside this side over
	// the same span: what the machine made of the bare I/O meanwhile.
	floor time.Duration
	// onCPU and floorOnCPU are steadySelf and floor to the nanosecond
	// (proc.onCPU), the processes' own time only.
	onCPU, floorOnCPU time.Duration
}

// warmUp is left out of the steady-state figure: process start,
// configuration, first connections.
const warmUp = 30 * time.Second

// s1 runs the steady node on each side for d.
func (h *harness) s1(d time.Duration, runs int) (string, error) {
	base := h.serve(1)
	smi, err := h.nvidiaSMI()
	if err != nil {
		return "", err
	}
	sides := map[string][]side{}
	// The sides take turns, so that a neighbour's burst on a shared
	// machine does not land on one side only.
	for run := range runs {
		for _, name := range h.sides {
			db := fmt.Sprintf("s1_%s_%d", name, run)
			h.createDB(db)
			logPath := filepath.Join(h.work, name+"-s1.log")
			os.WriteFile(logPath, nil, 0o644)
			pprofAddr := ""
			if h.profile != "" && name == "tpsmon" {
				pprofAddr = freePort()
			}
			scrapeAddr := ""
			if h.scrape != "" && name == "tpsmon" {
				scrapeAddr = freePort()
			}
			p, err := h.startS1(name, run, base, smi, logPath, db, pprofAddr, scrapeAddr)
			if err != nil {
				return "", err
			}
			stopScrape := scrapeMetrics(scrapeAddr, 10*time.Second)
			sd, err := h.measureS1(p, name, run, d, base, logPath, db, pprofAddr)
			stopScrape()
			if err != nil {
				return "", err
			}
			sides[name] = append(sides[name], sd)
		}
	}
	return s1Table(sides, d, runs), nil
}

// startS1 starts one side of S1 on its own database; pprofAddr, when set,
// is where tpsmon serves its profiles, scrapeAddr its /metrics (h.scrape).
func (h *harness) startS1(name string, run int, base, smi, logPath, db, pprofAddr, scrapeAddr string) (*proc, error) {
	httpConf := `{listen: ""}`
	switch {
	case pprofAddr != "":
		httpConf = fmt.Sprintf("{listen: %q, pprof: true}", pprofAddr)
	case scrapeAddr != "":
		httpConf = fmt.Sprintf("{listen: %q, window_metrics: %t}", scrapeAddr, h.scrape == "windows")
	}
	if name == "tpsmon" {
		cfg := filepath.Join(h.work, "tpsmon-s1.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`window: 10s
gpu: {backend: sim, sim_gpus: 8, interval: 1s}
discovery: {enabled: false}
servers:
  - {name: vllm, engine: vllm, metrics_url: "%s/vllm", scrape_interval: 1s}
  - {name: sglang, engine: sglang, metrics_url: "%s/sglang", scrape_interval: 1s}
  - {name: vllm-log, engine: vllm, log: {file: "%s"}}
sink:
  influx: {url: "%s", bucket: %s}
  spool: {dir: "%s"}
http: %s
log: {level: warn}
`, base, base, logPath, h.influx, db, filepath.Join(h.work, fmt.Sprintf("s1-state-%d", run), "spool"), httpConf)), 0o644)
		return start(h.tpsmon, "run", "--config", cfg)
	}
	cfg := filepath.Join(h.work, "telegraf-s1.conf")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`[agent]
  interval = "1s"
  flush_interval = "10s"
  metric_buffer_limit = 100000
[[outputs.influxdb_v2]]
  urls = ["%s"]
  token = ""
  organization = ""
  bucket = "%s"
[[inputs.nvidia_smi]]
  bin_path = "%s"
[[inputs.prometheus]]
  urls = ["%s/vllm", "%s/sglang"]
[[inputs.tail]]
  files = ["%s"]
  from_beginning = false
  data_format = "grok"
  grok_patterns = ['%%{GREEDYDATA}Avg prompt throughput: %%{NUMBER:prompt_tps:float} tokens/s, Avg generation throughput: %%{NUMBER:gen_tps:float} tokens/s, Running: %%{NUMBER:running:int} reqs, Waiting: %%{NUMBER:waiting:int} reqs, GPU KV cache usage: %%{NUMBER:kv:float}%%%%%%{GREEDYDATA}']
`, h.influx, db, smi, base, base, logPath)), 0o644)
	return start(h.telegraf, "--config", cfg)
}

// measureS1 runs one side for d, writing the log a line a second, and
// returns what it cost.
func (h *harness) measureS1(p *proc, name string, run int, d time.Duration, base, logPath, db, pprofAddr string) (side, error) {
	ctx, cancel := context.WithCancel(context.Background())
	go writeEverySecond(ctx, logPath)
	log.Printf("S1 %s for %v", name, d)
	t0 := time.Now()
	floorDB := db + "_floor"
	h.createDB(floorDB)
	fl, err := start(h.floor, "-url", base, "-log", logPath, "-influx", h.influx, "-db", floorDB,
		"-spool", filepath.Join(h.work, fmt.Sprintf("floor-%s-%d", name, run)))
	if err != nil {
		cancel()
		p.stop()
		return side{}, err
	}
	time.Sleep(warmUp)
	warm, warmSelf, floorWarm := p.cpu(), p.cpuSelf(), fl.cpu()
	warmOn, floorWarmOn := p.onCPU(), fl.onCPU()
	if name == "tpsmon" && pprofAddr != "" {
		// Returns once the CPU profile (the steady span less
		// a margin) and the allocations are read.
		h.profileSteady(pprofAddr, fmt.Sprintf("s1-run%d", run+1), d-warmUp-5*time.Second)
	}
	time.Sleep(time.Until(t0.Add(d)))
	steady, steadySelf, floor := p.cpu()-warm, p.cpuSelf()-warmSelf, fl.cpu()-floorWarm
	steadyOn, floorOn := p.onCPU()-warmOn, fl.onCPU()-floorWarmOn
	cancel()
	if _, err := fl.stop(); err != nil || fl.log.Len() > 0 {
		// The floor says nothing unless it failed, and then its
		// figure would be of less work.
		p.stop()
		return side{}, fmt.Errorf("floor: %v %s", err, fl.log)
	}
	u, err := p.stop()
	if err != nil {
		return side{}, err
	}
	time.Sleep(2 * time.Second)
	sd := side{name: name, u: u, points: h.points(db), steady: steady, steadySelf: steadySelf, span: d - warmUp, floor: floor,
		onCPU: steadyOn, floorOnCPU: floorOn}
	log.Printf("S1 %s run %d: cpu %v, steady %v (itself %v, %v to the ns; the floor beside it %v, %v to the ns: %.3f), peak RSS %d MiB, %d points; log tail:\n%s",
		name, run+1, u.cpu, steady, steadySelf, steadyOn.Round(time.Microsecond), floor, floorOn.Round(time.Microsecond),
		steadyOn.Seconds()/floorOn.Seconds(), u.maxRSS>>20, sd.points, tail(p.log.String(), 5))
	return sd, nil
}

// s1Table formats S1's sides as min / median / max and ratios.
func s1Table(sides map[string][]side, d time.Duration, runs int) string {
	t, g := sides["tpsmon"], sides["telegraf"]
	col := func(ss []side, f func(side) float64, format string) string {
		return spread(each(ss, f), format)
	}
	rat := func(f func(side) float64) string {
		var r []float64
		for i := range min(len(t), len(g)) {
			if d := f(g[i]); d > 0 {
				r = append(r, f(t[i])/d)
			}
		}
		return spread(r, "%.3f")
	}
	cpu := func(s side) float64 { return s.u.cpu.Seconds() }
	steady := func(s side) float64 { return s.steady.Seconds() }
	steadySelf := func(s side) float64 { return s.steadySelf.Seconds() }
	rss := func(s side) float64 { return float64(s.u.maxRSS) / (1 << 20) }
	floor := func(s side) float64 { return s.floor.Seconds() }
	overFloor := func(s side) float64 {
		if s.floor <= 0 {
			return math.NaN() // shown as NaN: no figure, not a small one
		}
		return s.steady.Seconds() / s.floor.Seconds()
	}
	onCPU := func(s side) float64 { return s.onCPU.Seconds() }
	floorOnCPU := func(s side) float64 { return s.floorOnCPU.Seconds() }
	overFloorOnCPU := func(s side) float64 {
		if s.floorOnCPU <= 0 {
			return math.NaN()
		}
		return s.onCPU.Seconds() / s.floorOnCPU.Seconds()
	}
	points := func(s side) float64 { return float64(s.points) }
	return fmt.Sprintf(`## S1: steady node (8 GPUs, 2 servers scraped and 1 log, 1 Hz, %v each, %d runs per side)

Each cell is min / median / max over the runs (a single value for one run); the ratio is taken run by
run (tpsmon's run i against Telegraf's run i, which followed it).

| | tpsmon | Telegraf | tpsmon / Telegraf | target |
|---|---|---|---|---|
| CPU seconds (user+sys), whole run | %s | %s | %s | |
| CPU seconds after the first 30 s (steady state, %v), with the programs each ran | %s | %s | %s | ≤ 0.05 |
| the same, the daemon's own process only | %s | %s | %s | |
| steady CPU seconds of bench/floor, run beside the side over the same span | %s | %s | | |
| the side's steady CPU over the floor's beside it | %s | %s | %s | |
| the daemon's own steady CPU, to the nanosecond (its threads' schedstat) | %s | %s | %s | |
| bench/floor's, the same way | %s | %s | | |
| **the daemon's own steady CPU over the floor's, to the nanosecond** | %s | %s | %s | tpsmon ≤ 1.15 |
| peak RSS (MiB) | %s | %s | %s | ≤ 0.4 |
| points written | %s | %s | | |

tpsmon writes joined 10 s windows (one point per GPU and per server each); Telegraf writes every raw
sample (each input every second), unjoined: the point counts differ by design. bench/floor does only
S1's input and output (the ticks, both pages fetched and thrown away, the log read on notification, one
fsync'd append and one InfluxDB write per 10 s) on the same server, log and InfluxDB, over the same span.
The ticks of /proc/PID/stat are 10 ms, and the floor's steady CPU is 9-40 of them: the rows to the
nanosecond sum the threads' schedstat (the scheduler's own account of time on a CPU) and leave out the
programs a daemon ran, of which tpsmon runs none in S1 (its sim backend). A side's CPU over the floor's
beside it says how far the side is from that bare work in the same minutes;
it is not free of noise either, since the floor also pays for the side's own load on the machine (it
costs more beside Telegraf).
`, d, runs, col(t, cpu, "%.2f"), col(g, cpu, "%.2f"), rat(cpu),
		d-warmUp, col(t, steady, "%.2f"), col(g, steady, "%.2f"), rat(steady),
		col(t, steadySelf, "%.2f"), col(g, steadySelf, "%.2f"), rat(steadySelf),
		col(t, floor, "%.2f"), col(g, floor, "%.2f"),
		col(t, overFloor, "%.2f"), col(g, overFloor, "%.2f"), rat(overFloor),
		col(t, onCPU, "%.3f"), col(g, onCPU, "%.3f"), rat(onCPU),
		col(t, floorOnCPU, "%.3f"), col(g, floorOnCPU, "%.3f"),
		col(t, overFloorOnCPU, "%.3f"), col(g, overFloorOnCPU, "%.3f"), rat(overFloorOnCPU),
		col(t, rss, "%.1f"), col(g, rss, "%.1f"), rat(rss),
		col(t, points, "%.0f"), col(g, points, "%.0f"))
}

// each applies f to every side.
func each(ss []side, f func(side) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// spread formats min / median / max of v, or its one value.
func spread(v []float64, format string) string {
	if len(v) == 0 {
		return "–"
	}
	v = append([]float64(nil), v...)
	sort.Float64s(v)
	if len(v) == 1 {
		return fmt.Sprintf(format, v[0])
	}
	med := v[len(v)/2]
	if len(v)%2 == 0 {
		med = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return fmt.Sprintf(format+" / "+format+" / "+format, v[0], med, v[len(v)-1])
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// s2 appends n lines to a vLLM and a llama.cpp log as fast as possible
// and measures what reading them cost each side.
func (h *harness) s2(n, runs int) (string, error) {
	res := map[string][]float64{} // CPU seconds per run
	for run := range runs {
		for _, name := range []string{"tpsmon", "telegraf"} {
			vlog := filepath.Join(h.work, name+"-s2-vllm.log")
			llog := filepath.Join(h.work, name+"-s2-llama.log")
			os.WriteFile(vlog, nil, 0o644)
			os.WriteFile(llog, nil, 0o644)
			p, err := h.startS2(name, vlog, llog)
			if err != nil {
				return "", err
			}
			time.Sleep(3 * time.Second) // both start reading at the end of the (empty) files
			before := p.cpu()
			log.Printf("S2 %s: appending %d lines to each log", name, n)
			appendS2(vlog, llog, n)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			p.quiet(ctx)
			cancel()
			used := p.cpu() - before
			u, _ := p.stop()
			log.Printf("S2 %s run %d: %v CPU for %d lines (%v total, peak RSS %d MiB)", name, run+1, used, 2*n, u.cpu, u.maxRSS>>20)
			res[name] = append(res[name], used.Seconds())
		}
	}
	perSec := func(cpu []float64) []float64 {
		out := make([]float64, len(cpu))
		for i, c := range cpu {
			out[i] = float64(2*n) / math.Max(c, 0.01)
		}
		return out
	}
	t, g := res["tpsmon"], res["telegraf"]
	var rs []float64
	for i := range t {
		rs = append(rs, g[i]/math.Max(t[i], 0.01))
	}
	return fmt.Sprintf(`## S2: log firehose (%d vLLM V1 and %d llama.cpp lines appended as fast as possible, %d runs per side)

Each cell is min / median / max over the runs (a single value for one run).

| | tpsmon | Telegraf (tail + grok) | tpsmon / Telegraf | target |
|---|---|---|---|---|
| CPU seconds to read them | %s | %s | | |
| lines per CPU second | %s | %s | %s | ≥ 1,000,000 (tpsmon) |

The parser alone: `+"`go test -bench Parse ./collector/logline`"+`; the log path end to end without the harness:
`+"`go test -run XXX -bench LogPath ./daemon/agent`"+` (lines per CPU second).
`, n, n, runs, spread(t, "%.2f"), spread(g, "%.2f"), spread(perSec(t), "%.0f"), spread(perSec(g), "%.0f"), spread(rs, "%.2f")), nil
}

// startS2 starts one side of S2 following the two logs.
func (h *harness) startS2(name, vlog, llog string) (*proc, error) {
	if name == "tpsmon" {
		cfg := filepath.Join(h.work, "tpsmon-s2.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`window: 10s
gpu: {backend: none}
discovery: {enabled: false}
servers:
  - {name: vllm, engine: vllm, log: {file: "%s"}}
  - {name: llama, engine: llamacpp, log: {file: "%s"}}
sink: {file: {path: "%s"}}
http: {listen: ""}
log: {level: warn}
`, vlog, llog, filepath.Join(h.work, "s2.lp"))), 0o644)
		return start(h.tpsmon, "run", "--config", cfg)
	}
	cfg := filepath.Join(h.work, "telegraf-s2.conf")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`[agent]
  interval = "1s"
  flush_interval = "1s"
  metric_buffer_limit = 1000000
[[outputs.influxdb_v2]]
  urls = ["%s"]
  token = ""
  organization = ""
  bucket = "s2_telegraf"
[[inputs.tail]]
  files = ["%s", "%s"]
  from_beginning = false
  data_format = "grok"
  grok_patterns = ['%%{GREEDYDATA}Avg prompt throughput: %%{NUMBER:prompt_tps:float} tokens/s, Avg generation throughput: %%{NUMBER:gen_tps:float} tokens/s, Running: %%{NUMBER:running:int} reqs, Waiting: %%{NUMBER:waiting:int} reqs, GPU KV cache usage: %%{NUMBER:kv:float}%%%%%%{GREEDYDATA}', '%%{GREEDYDATA}eval time = +%%{NUMBER:eval_ms:float} ms / +%%{NUMBER:tokens:int} tokens \(%%{GREEDYDATA}, +%%{NUMBER:tps:float} tokens per second\)']
`, h.influx, vlog, llog)), 0o644)
	h.createDB("s2_telegraf")
	return start(h.telegraf, "--config", cfg)
}

// appendS2 appends n lines to each log as fast as it can, both at once.
func appendS2(vlog, llog string, n int) {
	var wg sync.WaitGroup
	for _, f := range []struct {
		path string
		line func(int) string
	}{{vlog, func(i int) string { return vllmLine(time.Unix(1_700_000_000+int64(i), 0), float64(i%2000)) }}, {llog, llamaLine}} {
		wg.Go(func() {
			fh, _ := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND, 0)
			w := bufio.NewWriterSize(fh, 1<<20)
			for i := range n {
				w.WriteString(f.line(i))
			}
			w.Flush()
			fh.Close()
		})
	}
	wg.Wait()
}

// s3 runs tpsmon with 64 GPUs and 16 servers for d, sampling its CPU
// share and RSS every 30 s.
func (h *harness) s3(d time.Duration) (string, error) {
	base := h.serve(16)
	h.createDB("s3")
	var servers strings.Builder
	for i := range 16 {
		fmt.Fprintf(&servers, "  - {name: vllm-%d, engine: vllm, metrics_url: \"%s/vllm/%d\", gpus: [%d, %d, %d, %d], scrape_interval: 1s}\n",
			i, base, i, 4*i, 4*i+1, 4*i+2, 4*i+3)
	}
	cfg := filepath.Join(h.work, "tpsmon-s3.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`window: 10s
gpu: {backend: sim, sim_gpus: 64, interval: 1s}
discovery: {enabled: false}
servers:
%ssink:
  influx: {url: "%s", bucket: s3}
  spool: {dir: "%s"}
http: {listen: ""}
log: {level: warn}
`, servers.String(), h.influx, filepath.Join(h.work, "s3-state", "spool"))), 0o644)
	p, err := start(h.tpsmon, "run", "--config", cfg)
	if err != nil {
		return "", err
	}
	var rows strings.Builder
	step := 30 * time.Second
	lastCPU, lastT := p.cpu(), time.Now()
	maxShare, maxRSS := 0.0, int64(0)
	var firstRSS int64
	for time.Since(p.start) < d {
		time.Sleep(step)
		cpu, now := p.cpu(), time.Now()
		share := (cpu - lastCPU).Seconds() / now.Sub(lastT).Seconds()
		rss := p.rss()
		if firstRSS == 0 {
			firstRSS = rss
		}
		maxShare, maxRSS = math.Max(maxShare, share), max(maxRSS, rss)
		fmt.Fprintf(&rows, "| %4.0f s | %.2f %% | %.1f |\n", now.Sub(p.start).Seconds(), 100*share, float64(rss)/(1<<20))
		lastCPU, lastT = cpu, now
	}
	u, err := p.stop()
	if err != nil {
		return "", err
	}
	pts := h.points("s3")
	log.Printf("S3: cpu %v over %v, peak RSS %d MiB, %d points", u.cpu, u.elapsed, u.maxRSS>>20, pts)
	return fmt.Sprintf(`## S3: scale (64 GPUs, 16 servers, 1 Hz, %v)

Whole run: %.2f CPU seconds over %.0f s = %.2f %% of one core; peak RSS %.1f MiB; %d points written.
Targets: below 1 %% of one core and 64 MiB RSS, flat over 10 minutes.

| since start | CPU (share of one core, last 30 s) | RSS (MiB) |
|---|---|---|
%s
RSS first %.1f MiB, last %.1f MiB, highest %.1f MiB; highest 30 s CPU share %.2f %%.
`, d, u.cpu.Seconds(), u.elapsed.Seconds(), 100*u.cpu.Seconds()/u.elapsed.Seconds(), float64(u.maxRSS)/(1<<20), pts,
		rows.String(), float64(firstRSS)/(1<<20), float64(p.lastRSS())/(1<<20), float64(maxRSS)/(1<<20), 100*maxShare), nil
}

// lastRSS is the process's RSS at its end, from the last sample taken.
func (p *proc) lastRSS() int64 { return p.rssSeen }

// scrapeMetrics reads http://addr/metrics every interval, as a Prometheus
// scraping tpsmon once a window would, until the returned stop is called;
// with no addr it does nothing. What it reads is thrown away: the cost
// measured is the daemon's.
func scrapeMetrics(addr string, every time.Duration) (stop func()) {
	if addr == "" {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				resp, err := http.Get("http://" + addr + "/metrics")
				if err != nil {
					log.Printf("scraping tpsmon's /metrics: %v", err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	return func() { close(done); <-exited }
}
