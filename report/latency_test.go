package report

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// latWin is one window's latency fields as tpsmon writes them; NaN is
// absent.
type latWin struct {
	t                       time.Time
	source                  string
	q                       map[string][3]float64 // value, lo, hi per quantile field
	exact, lo, hi, requests float64
	phase                   string
	queueP99                float64
	basis                   string // ttft_basis; "" none
}

var latStart = time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC)

const latWindows = 60 // one hour of 1-minute windows

// edges are a histogram's finite bucket edges.
var edges = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// bucketOf is the histogram bucket (lo, hi] that holds v.
func bucketOf(v float64) (float64, float64) {
	lo := 0.0
	for _, e := range edges {
		if v <= e {
			return lo, e
		}
		lo = e
	}
	return lo, math.Inf(1)
}

// latencyWindows is an hour of two servers' windows whose answers are
// known:
//   - h/hist, from histograms: quantiles interpolated with their bucket's
//     edges, attainment bounded; window 20 had too few requests for any
//     quantile, window 55's TTFT p90 lay above the last edge (a lower
//     bound only); windows 40-49 under the floor for queueing, 50-52 for
//     decode;
//   - h/req, from request lines: exact values, exact attainment, 1.0
//     except windows 30-54 (0.5, under the floor: prefill); TTFT from the
//     prompt's evaluation in windows 0-9, the slot in 10-19, the HTTP
//     handler after.
func latencyWindows() map[string][]latWin {
	nan := math.NaN()
	out := map[string][]latWin{}
	for i := range latWindows {
		t := latStart.Add(time.Duration(i) * time.Minute)
		h := latWin{t: t, source: "histogram", q: map[string][3]float64{}, exact: nan, requests: float64(10 + i%7), queueP99: nan}
		vals := map[string]float64{schema.FieldTTFTP50: 0.02 + 0.002*float64(i), schema.FieldTTFTP90: 0.08 + 0.01*float64(i),
			schema.FieldITLP50: 0.02 + 0.0001*float64(i%10), schema.FieldITLP90: 0.03 + 0.001*float64(i%10)}
		for q, v := range vals {
			lo, hi := bucketOf(v)
			h.q[q] = [3]float64{v, lo, hi}
		}
		h.lo, h.hi = 0.9-0.005*float64(i%10), 0.99
		switch {
		case i == 20:
			h.q, h.lo, h.hi, h.requests = nil, nan, nan, nan
		case i == 55:
			h.q[schema.FieldTTFTP90] = [3]float64{nan, 2.5, nan}
		}
		switch {
		case i >= 40 && i < 50:
			h.phase, h.lo, h.hi, h.queueP99 = "queue", 0.3, 0.6, 4
		case i >= 50 && i < 53:
			h.phase, h.lo, h.hi = "decode", 0.4, 0.7
		}
		out["hist"] = append(out["hist"], h)

		r := latWin{t: t, source: "requests", q: map[string][3]float64{}, exact: 1, requests: 5, queueP99: nan, basis: "http"}
		switch {
		case i < 10:
			r.basis = "prefill"
		case i < 20:
			r.basis = "slot"
		}
		ttft := 0.3
		if i >= 30 && i < 55 {
			ttft, r.exact, r.phase = 1.2, 0.5, "prefill"
		}
		r.lo, r.hi = r.exact, r.exact
		for q, v := range map[string]float64{schema.FieldTTFTP50: ttft / 2, schema.FieldTTFTP90: ttft, schema.FieldITLP50: 0.04, schema.FieldITLP90: 0.05 + 0.001*float64(i)} {
			r.q[q] = [3]float64{v, nan, nan}
		}
		out["req"] = append(out["req"], r)
	}
	return out
}

func writeLatency(t *testing.T, base, db string, wins map[string][]latWin) {
	t.Helper()
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	for server, ws := range wins {
		for _, w := range ws {
			f := map[string]any{schema.FieldTokens: int64(6000), schema.FieldSystemTPS: 100.0, schema.FieldState: schema.StateOK, schema.FieldCoverage: 1.0,
				schema.FieldWindowS: 60.0, schema.FieldLatencySource: w.source, schema.FieldRunning: 4.0}
			put := func(k string, v float64) {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					f[k] = v
				}
			}
			for q, v := range w.q {
				put(q, v[0])
				put(schema.LoField(q), v[1])
				put(schema.HiField(q), v[2])
			}
			put(schema.FieldSLOAttainment, w.exact)
			put(schema.FieldSLOAttainmentLo, w.lo)
			put(schema.FieldSLOAttainmentHi, w.hi)
			put(schema.FieldSLORequests, w.requests)
			put(schema.FieldQueueP99, w.queueP99)
			if w.phase != "" {
				f[schema.FieldSLOMissPhase] = w.phase
			}
			if w.basis != "" {
				f[schema.FieldTTFTBasis] = w.basis
			}
			p := write.NewPoint(schema.Server, map[string]string{schema.TagHost: "h", schema.TagServer: server, schema.TagGPUs: "0", schema.TagEngine: "vllm"}, f, w.t)
			if buf, err = enc.AppendWrite(buf, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := in.Write(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
}

// wantQuantiles works out, from the windows themselves, what a set of
// windows says of one quantile field.
func wantQuantiles(ws []latWin, q string) (n int, median, worst, lo, hi float64, above int) {
	var vals []float64
	lo, hi, worst = math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, w := range ws {
		v, ok := w.q[q]
		if !ok {
			continue
		}
		n++
		if math.IsNaN(v[0]) {
			above++
			lo = min(lo, v[1])
			continue
		}
		vals = append(vals, v[0])
		worst = max(worst, v[0])
		lo, hi = min(lo, v[0]), max(hi, v[0])
		if !math.IsNaN(v[1]) {
			lo, hi = min(lo, v[1]), max(hi, v[2])
		}
	}
	slices.Sort(vals)
	if k := len(vals); k > 0 {
		median = (vals[(k-1)/2] + vals[k/2]) / 2
	}
	return n, median, worst, lo, hi, above
}

// wantAttainment is the requests-weighted attainment of windows: over
// all, and of the exact windows alone.
func wantAttainment(ws []latWin) (lo, hi, exact float64, requests float64, exactWins int) {
	var metLo, metHi, metExact, reqExact float64
	for _, w := range ws {
		if math.IsNaN(w.requests) {
			continue
		}
		requests += w.requests
		metLo += w.lo * w.requests
		metHi += w.hi * w.requests
		if !math.IsNaN(w.exact) {
			exactWins++
			metExact += w.exact * w.requests
			reqExact += w.requests
		}
	}
	exact = math.NaN()
	if reqExact > 0 {
		exact = metExact / reqExact
	}
	return metLo / requests, metHi / requests, exact, requests, exactWins
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// TestReportLatency: per server, each bucket's quantiles (median and worst
// window, bounds of the requests' quantile), the attainment weighted by
// requests with exact and bounded windows apart, and the windows under the
// SLO floor, against an hour of windows whose answers are known; then the
// page shows them.
func TestReportLatency(t *testing.T) {
	t.Parallel()
	warmBrowser()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "latency")
	wins := latencyWindows()
	writeLatency(t, base, db, wins)
	f := Filter{From: latStart, To: latStart.Add(time.Hour), Interval: 10 * time.Minute, Level: Raw}
	r, err := Build(context.Background(), NewClient(base, db, "", 30*time.Second), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*ServerLatency{}
	for _, s := range r.Servers {
		byName[s.Server] = s.Latency
	}
	for server, ws := range wins {
		l := byName[server]
		if l == nil {
			t.Fatalf("%s: no latency", server)
		}
		if l.Windows != latWindows || len(l.Series) != 6 {
			t.Errorf("%s: %d windows in %d buckets, want %d in 6", server, l.Windows, len(l.Series), latWindows)
		}
		for b, p := range l.Series {
			bucket := ws[10*b : 10*b+10]
			if !p.Time.Equal(bucket[0].t) {
				t.Errorf("%s bucket %d at %v, want %v", server, b, p.Time, bucket[0].t)
			}
			for _, q := range LatencyQuantiles {
				n, median, worst, lo, hi, above := wantQuantiles(bucket, q)
				got := p.Quantiles[q]
				if got.Windows != n || got.AboveLastEdge != above || !near(val(got.WindowMedian), median) || !near(val(got.WindowMax), worst) ||
					!near(val(got.RequestsLo), lo) {
					t.Errorf("%s bucket %d %s: %+v (median %v max %v lo %v), want %d windows, %d above, median %v, max %v, lo %v",
						server, b, q, got, val(got.WindowMedian), val(got.WindowMax), val(got.RequestsLo), n, above, median, worst, lo)
				}
				switch {
				case above > 0 && got.RequestsHi != nil:
					t.Errorf("%s bucket %d %s: an upper bound %v with a window above the last edge", server, b, q, *got.RequestsHi)
				case above == 0 && !near(val(got.RequestsHi), hi):
					t.Errorf("%s bucket %d %s: hi %v, want %v", server, b, q, val(got.RequestsHi), hi)
				}
				if wantInterp := map[string]bool{"hist": true}[server]; (got.Interpolated > 0) != wantInterp {
					t.Errorf("%s bucket %d %s: %d interpolated windows", server, b, q, got.Interpolated)
				}
			}
			lo, hi, exact, req, exactWins := wantAttainment(bucket)
			a := p.Attainment
			if a == nil || !near(a.Lo, lo) || !near(a.Hi, hi) || !near(a.Requests, req) || a.ExactWindows != exactWins {
				t.Errorf("%s bucket %d attainment %+v, want %v-%v of %v requests, %d exact windows", server, b, a, lo, hi, req, exactWins)
			}
			if a != nil && !math.IsNaN(exact) && !near(val(a.ExactShare), exact) {
				t.Errorf("%s bucket %d exact share %v, want %v", server, b, val(a.ExactShare), exact)
			}
		}
		// The range: the same over every window; no median of medians.
		for _, q := range LatencyQuantiles {
			n, _, worst, lo, hi, above := wantQuantiles(ws, q)
			got := l.Range[q]
			if got.Windows != n || got.AboveLastEdge != above || got.WindowMedian != nil || !near(val(got.WindowMax), worst) || !near(val(got.RequestsLo), lo) ||
				(above == 0) != (got.RequestsHi != nil) || (above == 0 && !near(*got.RequestsHi, hi)) {
				t.Errorf("%s range %s: %+v, want %d windows (%d above), max %v, %v-%v", server, q, got, n, above, worst, lo, hi)
			}
		}
		lo, hi, exact, req, _ := wantAttainment(ws)
		if a := l.Attainment; a == nil || !near(a.Lo, lo) || !near(a.Hi, hi) || !near(a.Requests, req) {
			t.Errorf("%s attainment over the range %+v, want %v-%v of %v", server, l.Attainment, lo, hi, req)
		}
		switch a := l.Attainment; server {
		case "req":
			// Every window exact: one share, the exact one.
			if a.Exact == nil || !near(*a.Exact, exact) || a.BoundedWindows != 0 || a.BoundedLo != nil {
				t.Errorf("req: %+v, want exact %v and no bounded windows", a, exact)
			}
		case "hist":
			// Window 20 had no attainment.
			if a.Exact != nil || a.ExactWindows != 0 || a.BoundedWindows != latWindows-1 || !near(val(a.BoundedLo), lo) || !near(val(a.BoundedHi), hi) {
				t.Errorf("hist: %+v, want bounds only, %d windows", a, latWindows-1)
			}
		}
	}
	// Under the floor: hist 13 windows, all listed, latest first; req 25,
	// the latest MaxMissed listed.
	h, q := byName["hist"], byName["req"]
	if h.MissedWindows != 13 || len(h.Missed) != 13 || h.MissedOmitted != 0 || h.MissedByPhase["queue"] != 10 || h.MissedByPhase["decode"] != 3 {
		t.Errorf("hist missed: %d, %d listed, %d omitted, %v", h.MissedWindows, len(h.Missed), h.MissedOmitted, h.MissedByPhase)
	}
	if m := h.Missed[0]; !m.Time.Equal(latStart.Add(52*time.Minute)) || m.Phase != "decode" || m.Lo != 0.4 || m.Hi != 0.7 || m.Exact != nil || m.Requests != float64(10+52%7) {
		t.Errorf("hist's latest missed window %+v", m)
	}
	if m := h.Missed[len(h.Missed)-1]; !m.Time.Equal(latStart.Add(40*time.Minute)) || m.Phase != "queue" || val(m.QueueP99) != 4 {
		t.Errorf("hist's first missed window %+v", m)
	}
	if q.MissedWindows != 25 || len(q.Missed) != MaxMissed || q.MissedOmitted != 25-MaxMissed || !q.Missed[0].Time.Equal(latStart.Add(54*time.Minute)) ||
		val(q.Missed[0].Exact) != 0.5 || val(q.Missed[0].TTFTP90) != 1.2 {
		t.Errorf("req missed: %d, %d listed, %d omitted, latest %+v", q.MissedWindows, len(q.Missed), q.MissedOmitted, q.Missed[0])
	}
	// Only the bases that leave part of the wait out, each once.
	if !slices.Equal(q.TTFTNarrowed, []string{"prefill", "slot"}) || h.TTFTNarrowed != nil {
		t.Errorf("TTFT bases narrowed: req %q, want prefill and slot; hist %q, want none", q.TTFTNarrowed, h.TTFTNarrowed)
	}
	found := strings.Join(r.Findings, "\n")
	for _, want := range []string{"server hist on h was under its SLO floor in 13 windows (the time went to queue in 10, decode in 3); 75.3–90.8% of 758 requests met the objectives (bounds: histograms) over the range",
		"server req on h was under its SLO floor in 25 windows (of the latest 20, the time went to prefill in 20); 79.2% of 300 requests met the objectives over the range"} {
		if !strings.Contains(found, want) {
			t.Errorf("finding %q missing:\n%s", want, found)
		}
	}

	// The page: a latency chart per quantity and server, the missed
	// windows' table with what it leaves out.
	dir := t.TempDir()
	html := filepath.Join(dir, "report.html")
	out, _ := os.Create(html)
	if err := WriteHTML(out, r); err != nil {
		t.Fatal(err)
	}
	out.Close()
	page, _ := os.ReadFile(html)
	for _, want := range []string{"Time to first token", "Inter-token latency", "SLO attainment", "5 more windows under the floor", "interpolated",
		template.HTMLEscapeString("In some or all windows its TTFT " + schema.TTFTNarrowed("slot")),
		template.HTMLEscapeString("In some or all windows its TTFT " + schema.TTFTNarrowed("prefill"))} {
		if !strings.Contains(string(page), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	shot := filepath.Join(dir, "report.png")
	screenshot(t, html, shot)
	checkNotBlank(t, shot)
	if *shots != "" {
		b, _ := os.ReadFile(shot)
		js, _ := json.MarshalIndent(r, "", "  ")
		if err := errors.Join(os.WriteFile(filepath.Join(*shots, "report-latency.png"), b, 0o644),
			os.WriteFile(filepath.Join(*shots, "report-latency.json"), js, 0o644)); err != nil {
			t.Error(err)
		}
	}
}

// TestReportLatencyOnRollups: rollups carry no latency field; the report
// says so rather than showing nothing.
func TestReportLatencyOnRollups(t *testing.T) {
	b := &builder{f: Filter{Level: Hourly}, r: &Report{}}
	if err := b.latency(); err != nil || b.r.LatencyNote == "" {
		t.Errorf("rollup level: %v, note %q", err, b.r.LatencyNote)
	}
}
