// Package replay joins recorded inputs offline (tpsmon replay, design
// §7): a server's log, a directory of metrics scrapes, an nvidia-smi CSV.
package replay

import (
	"bufio"
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/collector/logline"
	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// timed is one replayed input.
type timed struct {
	t      time.Time
	server *sample.Server
	gpu    *sample.GPU
	log    *sample.Interval
	watch  bool // the log was readable at t
}

// Writer receives the closed windows, analysed.
type Writer interface {
	// WriteWindows writes cs, which it must not hold past the call: their
	// storage is reused for the next windows.
	WriteWindows(cs []analysis.Closed) error
}

// Options say what to replay and how; the error messages name the replay
// command's flags.
type Options struct {
	LogFile    string
	Year       int       // of log timestamps that carry none; 0: this year
	StartedAt  time.Time // llama.cpp --log-timestamps count from it
	MetricsDir string
	GPUCSV     string
	Window     time.Duration
	Server     string
	Engine     string
	GPUs       []string // serving the server; empty: all
	Host       string
	TZ         string // of the CSV and log timestamps
	// Facts are what the analysis of the windows knows besides them; the
	// zero value: the default thresholds, nothing known of the server.
	Facts analysis.Facts
}

// recording is what the inputs hold, in time order once sorted.
type recording struct {
	logs    packed  // in the order of their ends
	inputs  []timed // scrapes and GPU readings
	servers []window.Server
	gaps    []time.Duration
	// watched are the stretches the log was watched; join adds a watch
	// input every second of them, made as they are fed (see feed).
	watched []span
	// segments are the log's segments, one a stretch (spanSet.segments).
	segments []segment
	sampled  bool // scrapes or GPU readings are among the inputs
}

// Run joins the recorded inputs of o and writes the windows to out;
// warnings about inputs go to warn. It stops when ctx is done.
func Run(ctx context.Context, o Options, out Writer, warn io.Writer) error {
	if o.MetricsDir == "" && o.GPUCSV == "" && o.LogFile == "" {
		return errors.New("replay: nothing to replay: give --log, --metrics-dir and/or --gpu-csv")
	}
	if err := config.CheckWindow(o.Window); err != nil {
		return fmt.Errorf("--window %w", err)
	}
	if first, last := sample.MinTime.Year()+1, sample.MaxTime.Year()-1; o.Year != 0 && (o.Year < first || o.Year > last) {
		return fmt.Errorf("--year %d: want %d to %d (the years line protocol can hold), or 0 for this year", o.Year, first, last)
	}
	loc, err := time.LoadLocation(o.TZ)
	if err != nil {
		return fmt.Errorf("--tz: %w", err)
	}
	gpus := o.GPUs
	if len(gpus) == 0 {
		gpus = []string{"*"}
	}
	var rec recording
	defer rec.logs.release()
	if o.MetricsDir != "" || o.LogFile != "" {
		rec.servers = append(rec.servers, window.Server{Name: o.Server, GPUs: gpus, Source: schema.SourceMetrics})
	}
	if o.LogFile != "" {
		if err := rec.addLog(o, loc, warn); err != nil {
			return err
		}
	}
	if o.MetricsDir != "" {
		if err := rec.addMetrics(o, warn); err != nil {
			return err
		}
	}
	if o.GPUCSV != "" {
		if err := rec.addGPUs(o.GPUCSV, loc, warn); err != nil {
			return err
		}
	}
	if len(rec.inputs) == 0 && rec.logs.len() == 0 {
		return errors.New("replay: the inputs hold no samples")
	}
	return rec.join(ctx, o, out)
}

// addLog takes the intervals of a server's log, and the time it was
// watched.
func (rec *recording) addLog(o Options, loc *time.Location, warn io.Writer) error {
	lr, err := readLog(o.LogFile, o.Engine, loc, o.Year, o.StartedAt)
	if err != nil {
		return err
	}
	if lr.skipped > 0 {
		var by []string
		for reason, n := range lr.skippedBy {
			if n > 0 {
				by = append(by, fmt.Sprintf("%s %d", logline.SkipReason(reason), n))
			}
		}
		fmt.Fprintf(warn, "tpsmon: replay: %d lines looked like throughput lines but were not read (%s); the first: %s\n",
			lr.skipped, strings.Join(by, ", "), lr.firstSkip)
	}
	if lr.far > 0 {
		fmt.Fprintf(warn, "tpsmon: replay: %d throughput lines carry no time and were placed by timestamps more than %v away: their windows are uncertain\n", lr.far, logline.FarLimit)
	}
	warnRefused(warn, lr.refused, "throughput lines")
	if lr.canceled > 0 {
		fmt.Fprintf(warn, "tpsmon: replay: %d requests were cancelled by the server and printed no timing line: their tokens are not in the log (its metrics count them: replay --metrics-dir, or metrics_url live)\n", lr.canceled)
	}
	rec.servers[0].Engine, rec.servers[0].Model, rec.servers[0].EngineVersion = lr.id.Engine, lr.id.Model, lr.id.Version
	rec.logs = lr.ivs
	spans, silences, longest := lr.watched.result()
	rec.watched, rec.segments = spans, lr.watched.segments()
	if len(spans) > 0 {
		rec.gaps = append(rec.gaps, time.Second)
	}
	if silences > 0 {
		fmt.Fprintf(warn, "tpsmon: replay: the log is silent for more than %v %d times (longest %v): nothing was observed there, and those windows are not written\n",
			unwatchedAfter, silences, longest)
	}
	return nil
}

// warnRefused tells warn how many of what were refused, and why.
func warnRefused(warn io.Writer, refused map[sample.Discard]int, what string) {
	ds := slices.SortedFunc(maps.Keys(refused), func(a, b sample.Discard) int {
		return cmp.Or(strings.Compare(a.Series, b.Series), cmp.Compare(a.Reason, b.Reason))
	})
	for _, d := range ds {
		fmt.Fprintf(warn, "tpsmon: replay: %d %s refused, %s %s: impossible values are not joined\n", refused[d], what, d.Series, d.Reason)
	}
}

// unwatchedAfter is the longest silence of a log still taken as an idle
// server. Past it replay splits the recording, as the daemon does not
// write the windows of a time it was not running.
const unwatchedAfter = 24 * time.Hour

// span is a stretch of time, both ends included.
type span struct{ from, to time.Time }

// spanSet merges the intervals of a log, in any order, into the
// stretches it was watched: the log was watched from its first line to
// its last, as a silent stretch is an idle server, not a missing one,
// unless it is longer than unwatchedAfter (a restarted server, logs of two
// runs in one file). Two intervals are in one stretch when a chain of
// intervals joins them with no silence longer than that between links:
// the stretches are the connected parts of the union of the intervals,
// each drawn unwatchedAfter longer, whatever order they come in.
type spanSet struct {
	in []stretch // in time order, disjoint
	// late are intervals that began before the last stretch did, merged
	// in at the end (a sort, not an insertion each: a log in no order
	// would make that quadratic).
	late []stretch
}

// stretch is one watched stretch, with what join needs of the intervals
// in it.
type stretch struct {
	span
	n     int           // intervals
	reach time.Duration // the longest
}

// join makes a the stretch that holds a and b, in place (a log's every
// line extends its last stretch: no copies of the two).
func (a *stretch) join(b stretch) {
	if b.from.Before(a.from) {
		a.from = b.from
	}
	a.to, a.n, a.reach = latest(a.to, b.to), a.n+b.n, max(a.reach, b.reach)
}

func (ss *spanSet) add(from, to time.Time) {
	n := len(ss.in)
	switch {
	case n > 0 && from.Before(ss.in[n-1].from):
		ss.late = append(ss.late, newStretch(from, to))
	case n > 0 && !from.After(ss.in[n-1].to.Add(unwatchedAfter)): // Sub's overflow check costs twice this
		ss.in[n-1].extend(from, to)
	default:
		ss.in = append(ss.in, newStretch(from, to))
	}
}

// newStretch is the stretch of one interval.
func newStretch(from, to time.Time) stretch {
	return stretch{span: span{from, to}, n: 1, reach: to.Sub(from)}
}

// extend is join with one interval that starts in a or after it: a log's
// every line, so its length is taken only when it may be the longest.
func (a *stretch) extend(from, to time.Time) {
	a.to, a.n = latest(a.to, to), a.n+1
	if to.After(from.Add(a.reach)) {
		a.reach = to.Sub(from)
	}
}

// stretches are the stretches, the late intervals merged in.
func (ss *spanSet) stretches() []stretch {
	if len(ss.late) > 0 {
		all := append(ss.in, ss.late...)
		slices.SortStableFunc(all, func(a, b stretch) int { return a.from.Compare(b.from) })
		out := all[:1]
		for _, st := range all[1:] {
			if last := &out[len(out)-1]; st.from.Sub(last.to) <= unwatchedAfter {
				last.join(st)
			} else {
				out = append(out, st)
			}
		}
		ss.in, ss.late = out, nil
	}
	return ss.in
}

// latest is the later of a and b, a when they are the same instant.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// result is the stretches, how many silences longer than unwatchedAfter
// split them, and the longest of those.
func (ss *spanSet) result() (spans []span, silences int, longest time.Duration) {
	in := ss.stretches()
	for i, st := range in {
		if i > 0 {
			longest = max(longest, st.from.Sub(in[i-1].to))
		}
		spans = append(spans, st.span)
	}
	return spans, max(0, len(in)-1), longest
}

// segments are the segments join feeds of a log alone: one a stretch,
// every interval in it and a watch input every second, which is what the
// feed's own pass (feed.segment) finds, without a pass.
func (ss *spanSet) segments() []segment {
	var out []segment
	for _, st := range ss.stretches() {
		ticks := int(st.to.Sub(st.from)/time.Second) + 1
		out = append(out, segment{n: st.n + ticks, start: st.from, end: st.to, reach: st.reach})
	}
	return out
}

// addMetrics takes the scrapes of a metrics directory.
func (rec *recording) addMetrics(o Options, warn io.Writer) error {
	d, err := collector.DialectFor(o.Engine)
	if err != nil {
		return fmt.Errorf("--engine: %w", err)
	}
	ms, skipped, err := readMetricsDir(o.MetricsDir, d)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		fmt.Fprintf(warn, "tpsmon: replay: skipped %s\n", s)
	}
	refused := map[sample.Discard]int{}
	for _, m := range ms {
		for _, d := range m.Discards {
			refused[d]++
		}
	}
	warnRefused(warn, refused, "metric values")
	rec.sampled = rec.sampled || len(ms) > 0
	for i := range ms {
		rec.inputs = append(rec.inputs, timed{t: ms[i].Time, server: &ms[i]})
		if i > 0 {
			rec.gaps = append(rec.gaps, ms[i].Time.Sub(ms[i-1].Time))
		}
	}
	return nil
}

// addGPUs takes the readings of an nvidia-smi CSV; readings no GPU gives
// are dropped (sample.GPU.Check), and warn is told how many and why.
func (rec *recording) addGPUs(path string, loc *time.Location, warn io.Writer) error {
	gs, err := readGPUCSV(path, loc)
	if err != nil {
		return err
	}
	refused := map[sample.Discard]int{}
	for i := range gs {
		for _, d := range gs[i].Check() {
			refused[d]++
		}
	}
	warnRefused(warn, refused, "GPU readings")
	rec.sampled = rec.sampled || len(gs) > 0
	last := map[string]time.Time{}
	for i := range gs {
		rec.inputs = append(rec.inputs, timed{t: gs[i].Time, gpu: &gs[i]})
		if p, ok := last[gs[i].UUID]; ok {
			rec.gaps = append(rec.gaps, gs[i].Time.Sub(p))
		}
		last[gs[i].UUID] = gs[i].Time
	}
	return nil
}

// join feeds the inputs to a joiner in time order, closes every window
// at the end of observation and writes them to out as they close, a batch
// at a time. A silence of every input longer than unwatchedAfter ends one
// joiner and starts the next, so the windows of nobody's watch are neither
// written nor held.
func (rec *recording) join(ctx context.Context, o Options, out Writer) error {
	byTime := func(a, b timed) int { return a.t.Compare(b.t) }
	slices.SortStableFunc(rec.inputs, byTime)
	w := batcher{out: out, facts: &o.Facts}
	maxGap := maxGapOf(rec.gaps)
	// A log alone is fed a stretch at a time; with other inputs, the
	// feed's own pass finds where its segments end.
	segs := rec.segments
	for f := newFeed(&rec.logs, rec.inputs, rec.watched); !f.done(); {
		var sg segment
		if rec.sampled {
			sg = f.segment()
		} else {
			sg, segs = segs[0], segs[1:]
		}
		if err := rec.joinSegment(ctx, o, maxGap, &f, sg, &w); err != nil {
			return err
		}
	}
	return w.flush()
}

// batcher hands closed windows to a Writer a batch at a time: a long
// replay's windows are written as it goes, not held to its end.
type batcher struct {
	out      Writer
	facts    *analysis.Facts
	pending  []window.Closed
	analysed []analysis.Closed
	err      error
}

// batchWindows is how many closed windows a batch holds.
const batchWindows = 256

// close closes j's windows that began before now into the batch. The
// batch's storage is reused from batch to batch: the writers hold no
// window past their call.
func (b *batcher) close(j *window.Joiner, now time.Time) {
	b.pending = j.CloseAppend(b.pending, now)
	if len(b.pending) >= batchWindows {
		b.write()
	}
}

// write analyses what is pending and writes it. A writer's error (a point it could not
// encode) does not stop the replay: the other windows still go out, and
// flush returns the first.
func (b *batcher) write() {
	b.analysed = analysis.Append(b.analysed[:0], b.pending, b.facts)
	if err := b.out.WriteWindows(b.analysed); err != nil && b.err == nil {
		b.err = err
	}
	b.pending = b.pending[:0]
}

// flush writes what is pending, even when nothing is, so that a table's
// header is written; it returns the first error of every write.
func (b *batcher) flush() error {
	b.write()
	return b.err
}

// begin is when an input's observation begins: a log line's interval
// starts before the line, a request's from its slot (HeldStart).
func (in timed) begin() time.Time {
	if in.log != nil && in.log.HeldStart().Before(in.t) {
		return in.log.HeldStart()
	}
	return in.t
}

// end is when an input's observation ends: just after a sample, or at the
// end of a log line's interval, which is exclusive of the next window.
func (in timed) end() time.Time {
	if in.server != nil || in.gpu != nil {
		return in.t.Add(time.Nanosecond)
	}
	return in.t
}

// closeEvery is how many inputs joinSegment feeds between two looks for
// windows to close: a window closed later than it could be is the same.
const closeEvery = 64

// joinSegment joins the inputs of the next segment of f.
func (rec *recording) joinSegment(ctx context.Context, o Options, maxGap time.Duration, f *feed, sg segment, out *batcher) error {
	j := window.New(window.Config{Window: o.Window, Grace: 0, MaxGap: maxGap, Host: o.Host,
		Start: sg.start}, rec.servers)
	// A log's windows are closed as the feed passes them, so that the
	// joiner holds a few windows rather than the whole recording: a window
	// is done once no input to come reaches back into it (none begins more
	// than sg.reach before its time) and the watch inputs its coverage
	// looks at past its end (up to maxGap) are in. Scrapes and GPU readings
	// keep every window open to the end: a counter's window needs its next
	// reading, and a scrape may name the model the windows are tagged with.
	behind := max(sg.reach, maxGap) + o.Window
	for i := range sg.n {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("replay: %w", err)
			}
		}
		in := f.next()
		if !rec.sampled && i%closeEvery == 0 {
			// Close ends the windows that began before its time.
			out.close(j, in.t.Add(-behind))
		}
		switch {
		case in.server != nil:
			j.AddServer(o.Server, *in.server)
		case in.gpu != nil:
			j.AddGPU(*in.gpu)
		case in.log != nil:
			j.AddLog(o.Server, *in.log)
		case in.watch:
			j.Watch(o.Server, in.t)
		}
	}
	out.close(j, sg.end)
	return nil
}

// maxGapOf allows 2.5 times the typical interval of the recording.
func maxGapOf(gaps []time.Duration) time.Duration {
	if len(gaps) == 0 {
		return time.Second
	}
	sort.Slice(gaps, func(a, b int) bool { return gaps[a] < gaps[b] })
	return max(time.Second, gaps[len(gaps)/2]*5/2)
}

// readMetricsDir parses every <unix-ms>.prom file of dir, in time order,
// with dialect d (nil: detected from the first page). Files that do not
// parse are skipped and named in skipped.
func readMetricsDir(dir string, d *collector.Dialect) (out []sample.Server, skipped []string, err error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.prom"))
	if err != nil {
		return nil, nil, err
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("--metrics-dir %s: no <unix-ms>.prom files", dir)
	}
	type file struct {
		name string
		ms   int64
	}
	var files []file
	for _, n := range names {
		ms, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(n), ".prom"), 10, 64)
		if err != nil {
			skipped = append(skipped, n+": name is not <unix-milliseconds>.prom")
			continue
		}
		if !sample.InRange(time.UnixMilli(ms)) {
			skipped = append(skipped, n+": its time is outside 1677-2262, the years line protocol can hold")
			continue
		}
		files = append(files, file{n, ms})
	}
	sort.Slice(files, func(a, b int) bool { return files[a].ms < files[b].ms })
	var der collector.Deriver
	for _, f := range files {
		b, err := os.ReadFile(f.name)
		if err != nil {
			return nil, nil, err
		}
		// As the live scraper reads a page: the dialect detected from the
		// first page that names one is kept.
		s, used, err := collector.ReadPage(b, d)
		d = used
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s: %v", f.name, err))
			continue
		}
		s.Time = time.UnixMilli(f.ms)
		out = append(out, der.Derive(s))
	}
	return out, skipped, nil
}

// readGPUCSV parses nvidia-smi's --query-gpu CSV. Columns are found by
// their header name; "[N/A]" and "[Not Supported]" values are absent.
func readGPUCSV(path string, loc *time.Location) ([]sample.GPU, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--gpu-csv: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("--gpu-csv %s: header: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range header {
		name, _, _ := strings.Cut(strings.TrimSpace(h), " ")
		col[name] = i
	}
	for _, need := range []string{"timestamp", "index", "uuid"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("--gpu-csv %s: no %q column in the header", path, need)
		}
	}
	var out []sample.GPU
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("--gpu-csv %s: %w", path, err)
		}
		s, err := csvRow{col: col, rec: rec}.sample(loc)
		if err != nil {
			return nil, fmt.Errorf("--gpu-csv %s line %d: %w", path, line, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// maxGPUIndex bounds a GPU index read from a CSV: NVML numbers a node's
// GPUs from 0, and no node has thousands.
const maxGPUIndex = 1023

// csvRow is one record of the GPU CSV, read by header name.
type csvRow struct {
	col map[string]int
	rec []string
}

// get is the named column's value; empty and bracketed ("[N/A]") values
// are absent.
func (c csvRow) get(name string) (string, bool) {
	i, ok := c.col[name]
	if !ok || i >= len(c.rec) {
		return "", false
	}
	v := strings.TrimSpace(c.rec[i])
	if v == "" || strings.HasPrefix(v, "[") {
		return "", false
	}
	return v, true
}

// num is the named column as a number, its unit suffix dropped.
func (c csvRow) num(name, unit string) (float64, bool) {
	v, ok := c.get(name)
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(v, unit)), 64)
	return x, err == nil
}

// sample is the row as a GPU sample; fields the row lacks are not in Has.
func (c csvRow) sample(loc *time.Location) (sample.GPU, error) {
	ts, _ := c.get("timestamp")
	t, err := time.ParseInLocation("2006/01/02 15:04:05.000", ts, loc)
	if err != nil {
		return sample.GPU{}, fmt.Errorf("timestamp %q: want YYYY/MM/DD HH:MM:SS.mmm", ts)
	}
	if !sample.InRange(t) {
		return sample.GPU{}, fmt.Errorf("timestamp %q: outside 1677-2262, the years line protocol can hold", ts)
	}
	is, _ := c.get("index")
	idx, err := strconv.Atoi(is)
	if err != nil || idx < 0 || idx > maxGPUIndex {
		return sample.GPU{}, fmt.Errorf("index %q: want a GPU's index, 0 to %d", is, maxGPUIndex)
	}
	uuid, ok := c.get("uuid")
	if !ok {
		return sample.GPU{}, errors.New("no uuid: a reading must say which GPU it is")
	}
	name, _ := c.get("name")
	s := sample.GPU{Time: t, Index: idx, UUID: uuid, Name: name}
	if v, ok := c.num("utilization.gpu", "%"); ok {
		s.UtilPct, s.Has = v, s.Has|sample.FieldUtil
	}
	if v, ok := c.num("utilization.memory", "%"); ok {
		s.MemUtilPct, s.Has = v, s.Has|sample.FieldMemUtil
	}
	used, okU := c.num("memory.used", "MiB")
	total, okT := c.num("memory.total", "MiB")
	if okU && okT {
		s.MemUsedBytes, s.MemTotalBytes, s.Has = mibBytes(used), mibBytes(total), s.Has|sample.FieldMemory
	}
	if v, ok := c.num("power.draw", "W"); ok {
		s.PowerW, s.Has = v, s.Has|sample.FieldPower
	}
	return s, nil
}

// mibBytes is a size in MiB as bytes. One that is no size (NaN, negative)
// or more than int64 holds comes out negative or at int64's end, for
// sample.GPU.Check to refuse rather than wrapped around to a plausible one.
func mibBytes(mib float64) int64 {
	switch b := mib * (1 << 20); {
	case !(b >= 0):
		return -1
	case b >= math.MaxInt64:
		return math.MaxInt64
	default:
		return int64(b)
	}
}

// logRead is what replay took from a server log.
type logRead struct {
	ivs     packed
	watched spanSet
	id      logline.Identity
	skipped uint64
	// skippedBy counts them by reason; firstSkip is the first (the daemon
	// logs the same).
	skippedBy [logline.NumSkipReasons]uint64
	firstSkip *logline.Skip
	far       int    // lines placed by timestamps far from them
	byGIN     int    // lines placed by the [GIN] line of their request
	canceled  uint64 // requests cancelled without a timing line
	refused   map[sample.Discard]int
}

// readLog parses a server log into intervals. Each line's time is its most
// precise timestamp (design §3); a line without one takes the best
// evidence around it (logline.Placer).
func readLog(path, engineName string, loc *time.Location, year int, startedAt time.Time) (out logRead, err error) {
	defer func() {
		if err != nil {
			out.ivs.release()
			out = logRead{}
		}
	}()
	p, err := logline.NewParser(engineName)
	if err != nil {
		return out, fmt.Errorf("--engine: %w", err)
	}
	if year == 0 {
		// This year, once: not a clock read per line.
		year = time.Now().In(loc).Year()
	}
	p.Loc, p.Year, p.Timestamps, p.StartedAt = loc, year, true, startedAt
	f, err := os.Open(path)
	if err != nil {
		return out, fmt.Errorf("--log: %w", err)
	}
	defer f.Close()
	out.refused = map[sample.Discard]int{}
	// A refused line's stretch is a hole in the windows, as live: watched
	// (the log went on) but not observed.
	hole := func(iv sample.Interval) {
		out.ivs.add(iv)
		out.watched.add(iv.Start, iv.End)
	}
	st := logline.Stream{Discarded: func(d sample.Discard) { out.refused[d]++ }, Hole: hole}
	timed := 0
	// Each record becomes an interval as it is placed: a long log's
	// records are not kept.
	pl := &logline.Placer{P: p, Emit: func(pr logline.Placed) {
		if pr.Kind == logline.Cancelled {
			return
		}
		if pr.Kind == logline.Failed {
			// A request's miss, in the window it ended in: it times
			// nothing, but the log was read there.
			if iv, ok := st.Interval(pr.Record, pr.Time); ok {
				out.ivs.add(iv)
				out.watched.add(iv.Start, iv.End)
			}
			return
		}
		timed++
		if iv, ok := st.Interval(pr.Record, pr.Time); ok {
			out.ivs.add(iv)
			out.watched.add(iv.HeldStart(), iv.End) // a request's lines speak from its slot on
		}
	}}
	r := bufio.NewReaderSize(f, 64<<10)
	var long []byte
	for {
		line, err := readLine(r, &long)
		if len(line) > 0 {
			pl.Line(line)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("--log %s: %w", path, err)
		}
	}
	pl.Close()
	if timed == 0 {
		switch {
		case p.Relative > 0:
			return out, fmt.Errorf("--log %s: its timestamps count from the server's start (llama.cpp --log-timestamps): give --started-at", path)
		case pl.Untimed > 0:
			return out, fmt.Errorf("--log %s: %d throughput lines but no timestamps to place them; replay needs them (docker logs -t or journalctl -o short-iso add them)", path, pl.Untimed)
		}
		if p.FirstSkip != nil {
			return out, fmt.Errorf("--log %s: no throughput lines read; %d looked like them, the first: %s", path, p.Skipped, p.FirstSkip)
		}
		return out, fmt.Errorf("--log %s: no throughput lines found", path)
	}
	if pl.Far == timed {
		// Every line would pile up at the few timestamps there are.
		return out, fmt.Errorf("--log %s: none of its %d throughput lines has a timestamp within %v; replay needs them (docker logs -t or journalctl -o short-iso add them)", path, timed, logline.FarLimit)
	}
	out.ivs.sortByEnd()
	out.id = p.Identity()
	if engineName != engine.Auto && engineName != "" {
		e, err := engine.Lookup(engineName)
		if err != nil {
			return out, fmt.Errorf("--engine: %w", err)
		}
		out.id.Engine = e.Name
	}
	out.skipped, out.far, out.byGIN, out.canceled = p.Skipped, pl.Far, pl.ByGIN, p.Cancelled
	out.skippedBy, out.firstSkip = p.SkippedBy, p.FirstSkip
	return out, nil
}

// readLine reads one line without its newline; a line longer than the
// parser looks at is consumed whole but only its head is kept, so a huge
// line costs bounded memory. The line is valid until the next call: it
// lies in r's buffer, or in buf for a line longer than that.
func readLine(r *bufio.Reader, buf *[]byte) ([]byte, error) {
	chunk, err := r.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return trimEOL(chunk[:min(len(chunk), tail.MaxLine)]), err
	}
	line := append((*buf)[:0], chunk[:min(len(chunk), tail.MaxLine)]...)
	for err == bufio.ErrBufferFull {
		chunk, err = r.ReadSlice('\n')
		if len(line) < tail.MaxLine {
			line = append(line, chunk[:min(len(chunk), tail.MaxLine-len(line))]...)
		}
	}
	*buf = line
	return trimEOL(line), err
}

// trimEOL is bytes.TrimRight(b, "\r\n") without its cutset's set built
// per line.
func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
