// Command reportscale measures `tpsmon report` on a simulated fleet in a
// real InfluxDB 1.8: it loads hourly and daily rollups for -days and raw
// windows for the last day, then builds the report for 24 h (raw), 30 d
// (hourly) and 90 d (daily), timing each and sampling the Go heap, and
// writes the numbers into a section of bench/RESULTS.md. With -dashboard
// it times the Grafana dashboard's panels instead (dashboard.go).
//
//	go run ./bench/reportscale -hosts 500 -gpus 8
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/sim/fleetsim"
	"github.com/tpsmon/tpsmon/sink"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reportscale:", err)
		os.Exit(1)
	}
}

// run is one straight script (load the three datasets, build the report
// over each range, rewrite the results section) whose steps share its
// flags, client and timings; cut into functions they would only pass
// those along, so it stays whole.
func run() error {
	hosts := flag.Int("hosts", 500, "simulated hosts")
	gpus := flag.Int("gpus", 8, "GPUs per host")
	days := flag.Int("days", 90, "days of hourly and daily rollups")
	rawWindow := flag.Duration("raw-window", time.Minute, "window length of the last day's raw windows")
	results := flag.String("results", "bench/RESULTS.md", "file whose report-scale section is rewritten")
	check := flag.Bool("check", false, "build each report again from the level's own series alone (report.Options.OneLevel) and compare the JSON")
	keep := flag.String("keep", "", "InfluxDB data directory kept between runs: loaded the first time (ending at that day's start, UTC, kept in DIR/end), read as it is after (same flags)")
	dash := flag.String("dashboard", "", "instead of the report, time every panel target of this Grafana dashboard file (packaging/grafana/tpsmon.json) as Grafana runs it, now being the loaded data's end, and rewrite the dashboard section")
	dashBefore := flag.String("dash-before", "", "with -dashboard: time this dashboard file too (an earlier version) and put its timings beside")
	dashRaw := flag.Duration("dash-raw-window", 0, "with -keep and -dashboard: replace the kept last day of raw windows with windows this long, once (the daemon's default is 10s)")
	runs := flag.Int("runs", 1, "builds of each range: time, InfluxDB's busy time and the peak heap as min / median / max")
	ragged := flag.Duration("ragged", 0, "end each report this long before the loaded data's end (under an hour: the rollups then cover all but the range's ragged ends, as when `tpsmon report --since 24h` runs mid-hour)")
	flag.Parse()

	dir := *keep
	loaded := false
	if dir == "" {
		d, err := os.MkdirTemp("", "reportscale")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		_, err := os.Stat(filepath.Join(dir, "loaded"))
		loaded = err == nil
	}
	base, stop, err := startInflux(dir)
	if err != nil {
		return err
	}
	defer stop()
	const db = "tpsmon"
	c := report.NewClient(base, db, "", 10*time.Minute)
	ctx := context.Background()
	// The rollups' retention policies as shipped (their shard durations
	// are most of what a long range costs InfluxDB).
	rps, err := os.ReadFile(filepath.Join("packaging", "influxdb", "retention.influxql"))
	if err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	stmts := []string{`CREATE DATABASE "tpsmon"`}
	for _, l := range strings.Split(string(rps), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
			stmts = append(stmts, l)
		}
	}
	for _, q := range stmts {
		if loaded {
			break // made by the run that loaded the data
		}
		if _, err := c.Query(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	fleet := fleetsim.Fleet{Hosts: *hosts, GPUs: *gpus, Unused: 2, Model: "NVIDIA H100 80GB HBM3"}
	end, err := dataEnd(dir, loaded)
	if err != nil {
		return err
	}
	span := time.Duration(*days) * 24 * time.Hour
	var loads []string
	load := func(what, bucket string, gen func(func(*write.Point) error) error) error {
		t0 := time.Now()
		n, err := writeAll(base, bucket, gen)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		d := time.Since(t0)
		loads = append(loads, fmt.Sprintf("| %s | %d | %.0f s | %.0f |", what, n, d.Seconds(), float64(n)/d.Seconds()))
		fmt.Fprintf(os.Stderr, "loaded %s: %d points in %v\n", what, n, d.Round(time.Second))
		return nil
	}
	if !loaded {
		if err := load(fmt.Sprintf("daily rollups, %d days", *days), db+"/tpsmon_1d", func(e func(*write.Point) error) error {
			return fleet.Rollups(end.Add(-span), end, 24*time.Hour, "_1d", e)
		}); err != nil {
			return err
		}
		if err := load(fmt.Sprintf("hourly rollups, %d days", *days), db+"/tpsmon_1h", func(e func(*write.Point) error) error {
			return fleet.Rollups(end.Add(-span), end, time.Hour, "_1h", e)
		}); err != nil {
			return err
		}
		// 25 hours: a day ending up to an hour early (-ragged) has raw
		// windows at both ends.
		if err := load(fmt.Sprintf("raw %v windows, 25 hours", *rawWindow), db, func(e func(*write.Point) error) error {
			return fleet.Raw(end.Add(-25*time.Hour), end, *rawWindow, e)
		}); err != nil {
			return err
		}
		if *keep != "" {
			if err := os.WriteFile(filepath.Join(dir, "loaded"), []byte(strings.Join(loads, "\n")+"\n"), 0o644); err != nil {
				return err
			}
		}
	} else if b, err := os.ReadFile(filepath.Join(dir, "loaded")); err == nil {
		loads = strings.Split(strings.TrimSpace(string(b)), "\n")
	}

	if *dash != "" {
		if *dashRaw > 0 {
			if *keep == "" {
				return errors.New("-dash-raw-window needs -keep (else load with -raw-window)")
			}
			if err := denseRaw(ctx, c, base, dir, fleet, end, *dashRaw); err != nil {
				return err
			}
			if b, err := os.ReadFile(filepath.Join(dir, "raw-"+dashRaw.String())); err == nil {
				loads = append(loads, strings.TrimSpace(string(b)))
			}
		}
		var before []dashRow
		if *dashBefore != "" {
			if before, err = timeDashboard(ctx, c, *dashBefore, end); err != nil {
				return fmt.Errorf("%s: %w", *dashBefore, err)
			}
		}
		rows, err := timeDashboard(ctx, c, *dash, end)
		if err != nil {
			return err
		}
		cmd := fmt.Sprintf("go run ./bench/reportscale -hosts %d -gpus %d -days %d -dashboard %s", *hosts, *gpus, *days, *dash)
		if *dashBefore != "" {
			cmd += " -dash-before " + *dashBefore
		}
		if *dashRaw > 0 {
			cmd += fmt.Sprintf(" -keep DIR -dash-raw-window %v", *dashRaw)
		}
		section := fmt.Sprintf(`<!-- dashboard-scale: written by go run ./bench/reportscale -dashboard -->
### Dashboard panels at fleet scale (%d hosts × %d GPUs)

Taken %s on %d CPU cores; InfluxDB 1.8.10 on loopback. Command: `+"`%s`"+`.
Every target of the dashboard file as Grafana runs it on opening: over the panel's default range (the dashboard's,
or the panel's relative time) ending at the loaded data's end; $__interval the range over the panel's points (its
maxDataPoints, else its width: %d px for 24 columns) rounded as Grafana rounds, at least the panel's min interval;
variables at their defaults (All: .*). Time: InfluxDB's answer (sent to last byte), median of 3 runs (1 run if
over %v).

| loaded | points | time | points/s |
|---|---|---|---|
%s

%s<!-- /dashboard-scale -->
`, *hosts, *gpus, time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), cmd, screenPx, slowRun,
			strings.Join(loads, "\n"), dashTable(rows, before))
		return rewriteSection(*results, "dashboard-scale", "report-scale", section)
	}

	var rows []string
	for _, r := range []struct {
		name string
		span time.Duration
	}{{"24 h", 24 * time.Hour}, {"7 d", 7 * 24 * time.Hour}, {"30 d", 30 * 24 * time.Hour}, {"90 d", 90 * 24 * time.Hour}} {
		if r.span > span && r.span > 24*time.Hour {
			continue
		}
		var times, busies, peaks []float64
		one := func() (string, error) {
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			var peak atomic.Uint64
			done := make(chan struct{})
			sampled := make(chan struct{})
			go func() { // sample the heap while the report is built
				defer close(sampled)
				var m runtime.MemStats
				for {
					runtime.ReadMemStats(&m)
					if m.HeapAlloc > peak.Load() {
						peak.Store(m.HeapAlloc)
					}
					select {
					case <-done:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
			}()
			var tr report.Trace
			tctx := report.WithTrace(ctx, &tr)
			t0 := time.Now()
			to := end.Add(-*ragged)
			f, err := report.Plan(tctx, c, report.Filter{From: to.Add(-r.span), To: to})
			var rep *report.Report
			if err == nil {
				rep, err = report.Build(tctx, c, f, report.Options{Prices: map[string]float64{"*": 2.5}})
			}
			elapsed := time.Since(t0)
			close(done)
			<-sampled
			if err != nil {
				return "", fmt.Errorf("report %s: %w", r.name, err)
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			// What the report itself holds (its servers' series, its GPUs):
			// what a heap flat in the answers still grows with.
			runtime.GC()
			var kept runtime.MemStats
			runtime.ReadMemStats(&kept)
			runtime.KeepAlive(rep)
			// The operating curve alone: what it adds to the report.
			t1 := time.Now()
			curves, _, err := report.OperatingCurves(ctx, c, f, report.DefaultPerUserFloor)
			if err != nil {
				return "", fmt.Errorf("curve %s: %w", r.name, err)
			}
			curveTime := time.Since(t1)
			if *check {
				one, err := report.Build(ctx, c, f, report.Options{Prices: map[string]float64{"*": 2.5}, OneLevel: true})
				if err != nil {
					return "", fmt.Errorf("one-level report %s: %w", r.name, err)
				}
				n, worst, other, err := compareJSON(rep, one)
				if err != nil {
					return "", err
				}
				fmt.Fprintf(os.Stderr, "report %s against one level: %d numbers, largest relative difference %.2g, %d other differences\n", r.name, n, worst, other)
			}
			var html strings.Builder
			if err := report.WriteHTML(&html, rep); err != nil {
				return "", err
			}
			busy := tr.InfluxBusy()
			var decode time.Duration
			for _, q := range tr.ByName() {
				decode += q.Decode
				fmt.Fprintf(os.Stderr, "  %-20s influx %6.2f s  decode %5.2f s  %7d KiB\n", q.Name, q.Influx.Seconds(), q.Decode.Seconds(), q.Bytes/1024)
			}
			times = append(times, elapsed.Seconds())
			busies = append(busies, busy.Seconds())
			peaks = append(peaks, float64(peak.Load())/(1<<20))
			fmt.Fprintf(os.Stderr, "report %s: %v, of which the operating curve alone %v\n", r.name, elapsed.Round(10*time.Millisecond), curveTime.Round(10*time.Millisecond))
			return fmt.Sprintf("| %s | %s, %s buckets | %s s | %s s | %.2f s | %d | %.2f s (%d curves) | %s MiB | %.1f MiB | %.0f MiB | %d | %d | %.0f | %d KiB |", r.name, f.Level, f.Interval,
				spread(times, 1), spread(busies, 1), decode.Seconds(), len(tr.Queries), curveTime.Seconds(), len(curves), spread(peaks, 0),
				(float64(kept.HeapAlloc)-float64(before.HeapAlloc))/(1<<20), float64(after.TotalAlloc-before.TotalAlloc)/(1<<20),
				len(rep.Servers), len(rep.GPUs), rep.GPUHours, html.Len()/1024), nil
		}
		var row string
		for range max(1, *runs) {
			var err error
			if row, err = one(); err != nil {
				return err
			}
		}
		rows = append(rows, row)
	}
	section := fmt.Sprintf(`<!-- report-scale: written by go run ./bench/reportscale -->
## Report at fleet scale (%d hosts × %d GPUs)

Taken %s on %d CPU cores, %s; InfluxDB 1.8.10 on loopback, started by the harness. Command:
`+"`go run ./bench/reportscale -hosts %d -gpus %d -days %d -raw-window %v -ragged %v -runs %d`"+`. Simulated fleet
(sim/fleetsim): a daily load wave, 2-minute phases, every fifth host with 2 unused GPUs.

| loaded | points | time | points/s |
|---|---|---|---|
%s

| range | series read | time (Plan + Build) | InfluxDB busy | reading | queries | operating curve alone | peak Go heap | the report's own | allocated | servers | GPUs | GPU-hours | HTML |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
%s
<!-- /report-scale -->
`, *hosts, *gpus, time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), runtime.Version(), *hosts, *gpus, *days, *rawWindow, *ragged, *runs,
		strings.Join(loads, "\n"), strings.Join(rows, "\n"))
	return rewriteSection(*results, "report-scale", "", section)
}

// spread is vs as "min / median / max" (one value alone), with prec
// decimals.
func spread(vs []float64, prec int) string {
	s := slices.Sorted(slices.Values(vs))
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	if len(s) == 1 {
		return f(s[0])
	}
	return f(s[0]) + " / " + f(s[len(s)/2]) + " / " + f(s[len(s)-1])
}

// compareJSON compares two reports' JSON: how many numbers, the largest
// relative difference between two of them, and how many other values
// (strings, lengths, keys) differ.
func compareJSON(a, b *report.Report) (n int, worst float64, other int, err error) {
	var x, y any
	for _, p := range []struct {
		r   *report.Report
		dst *any
	}{{a, &x}, {b, &y}} {
		j, err := json.Marshal(p.r)
		if err != nil {
			return 0, 0, 0, err
		}
		if err := json.Unmarshal(j, p.dst); err != nil {
			return 0, 0, 0, err
		}
	}
	var walk func(path string, a, b any)
	differ := func(path string, a, b any) {
		if other < 5 {
			fmt.Fprintf(os.Stderr, "  %s: %.200v vs %.200v\n", path, a, b)
		}
		other++
	}
	walk = func(path string, a, b any) {
		switch u := a.(type) {
		case map[string]any:
			v, ok := b.(map[string]any)
			if !ok || len(u) != len(v) {
				differ(path, a, b)
				return
			}
			for k := range u {
				walk(path+"."+k, u[k], v[k])
			}
		case []any:
			v, ok := b.([]any)
			if !ok || len(u) != len(v) {
				differ(path, a, b)
				return
			}
			for i := range u {
				walk(fmt.Sprintf("%s[%d]", path, i), u[i], v[i])
			}
		case float64:
			v, ok := b.(float64)
			if !ok {
				differ(path, a, b)
				return
			}
			n++
			if d := math.Abs(u-v) / math.Max(1, math.Max(math.Abs(u), math.Abs(v))); d > worst {
				worst = d
			}
		default:
			if a != b {
				differ(path, a, b)
			}
		}
	}
	walk("", x, y)
	return n, worst, other, nil
}

// rewriteSection replaces the section named name of path; a new one goes
// after the section named after (if there is one), else at the end.
func rewriteSection(path, name, after, section string) error {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	s := string(b)
	open, closing := "<!-- "+name, "<!-- /"+name+" -->\n"
	if i := strings.Index(s, open); i >= 0 {
		if j := strings.Index(s[i:], closing); j >= 0 {
			s = s[:i] + section + s[i+j+len(closing):]
			return os.WriteFile(path, []byte(s), 0o644)
		}
	}
	if after != "" {
		if i := strings.Index(s, "<!-- /"+after+" -->\n"); i >= 0 {
			i += len("<!-- /" + after + " -->\n")
			s = s[:i] + "\n" + section + s[i:]
			return os.WriteFile(path, []byte(s), 0o644)
		}
	}
	if s != "" && !strings.HasSuffix(s, "\n\n") {
		s += "\n"
	}
	return os.WriteFile(path, []byte(s+section), 0o644)
}

func writeAll(base, bucket string, gen func(func(*write.Point) error) error) (int, error) {
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: bucket, Timeout: 5 * time.Minute})
	if err != nil {
		return 0, err
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	n := 0
	err = gen(func(p *write.Point) error {
		if buf, err = enc.AppendWrite(buf, p); err != nil {
			return err
		}
		n++
		if len(buf) > 8<<20 {
			err := in.Write(context.Background(), buf)
			buf = buf[:0]
			return err
		}
		return nil
	})
	if err == nil {
		err = in.Write(context.Background(), buf)
	}
	return n, err
}

// startInflux runs influxd 1.8 from PATH or $(go env GOPATH)/bin on a free
// loopback port with its data under dir.
func startInflux(dir string) (string, func(), error) {
	bin, err := exec.LookPath("influxd")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		bin = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "influxd")
		if _, err := os.Stat(bin); err != nil {
			return "", nil, errors.New("influxd not found: run make influxd")
		}
	}
	addr := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}
	httpAddr := addr()
	cmd := exec.Command(bin, "run")
	cmd.Env = append(os.Environ(), "INFLUXDB_REPORTING_DISABLED=true", "INFLUXDB_BIND_ADDRESS="+addr(), "INFLUXDB_HTTP_BIND_ADDRESS="+httpAddr,
		"INFLUXDB_HTTP_LOG_ENABLED=false", "INFLUXDB_META_DIR="+filepath.Join(dir, "meta"), "INFLUXDB_DATA_DIR="+filepath.Join(dir, "data"),
		"INFLUXDB_DATA_WAL_DIR="+filepath.Join(dir, "wal"), "INFLUXDB_DATA_QUERY_LOG_ENABLED=false", "INFLUXDB_LOGGING_LEVEL=warn",
		"INFLUXDB_HTTP_MAX_BODY_SIZE=0", "INFLUXDB_COORDINATOR_WRITE_TIMEOUT=5m", "INFLUXDB_DATA_MAX_SERIES_PER_DATABASE=0", "INFLUXDB_DATA_MAX_VALUES_PER_TAG=0")
	logf, err := os.Create(filepath.Join(dir, "influxd.log"))
	if err != nil {
		return "", nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	}
	base := "http://" + httpAddr
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/ping"); err == nil {
			resp.Body.Close()
			return base, stop, nil
		}
	}
	stop()
	return "", nil, errors.New("influxd did not answer /ping in 30 s")
}

// dataEnd is the end of the loaded data: the day's start (UTC) when it
// is loaded now, else what the run that loaded it kept in dir/end (data
// kept before that file was written ends on the day it was loaded:
// "loaded"'s own time).
func dataEnd(dir string, loaded bool) (time.Time, error) {
	p := filepath.Join(dir, "end")
	if !loaded {
		end := time.Now().UTC().Truncate(24 * time.Hour)
		return end, os.WriteFile(p, []byte(end.Format(time.RFC3339)+"\n"), 0o644)
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		st, err := os.Stat(filepath.Join(dir, "loaded"))
		if err != nil {
			return time.Time{}, err
		}
		return st.ModTime().UTC().Truncate(24 * time.Hour), nil
	}
	if err != nil {
		return time.Time{}, err
	}
	end, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", p, err)
	}
	return end, nil
}
