package report

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/fleetsim"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// rawWindow is the dashboard test's raw windows: 2 minutes, 30 to an hour's
// interval, half the points (InfluxDB's ingest is most of its time) of 1.
const rawWindow = 2 * time.Minute

// TestDashboardQueriesReturnWhatWasWritten runs every target of the
// shipped dashboard file, with Grafana's variables filled as Grafana
// would, against a real InfluxDB holding a simulated fleet's raw windows
// and rollups of the same day, and checks what comes back against
// what was written.
func TestDashboardQueriesReturnWhatWasWritten(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "dash")
	for _, rp := range []string{"tpsmon_1h", "tpsmon_1d"} {
		influxtest.Query(t, base, db, fmt.Sprintf(`CREATE RETENTION POLICY "%s" ON "%s" DURATION 0s REPLICATION 1`, rp, db))
	}
	// 5 hosts of 4 GPUs; host 0 leaves GPUs 2 and 3 unused.
	fleet := fleetsim.Fleet{Hosts: 5, GPUs: 4, Unused: 2, Model: "H100"}
	from := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	to := from.Add(24 * time.Hour)
	writeSims(t, base,
		simWrite{db, func(e func(*write.Point) error) error { return fleet.Raw(from, to, rawWindow, e) }},
		simWrite{db + "/tpsmon_1h", func(e func(*write.Point) error) error { return fleet.Rollups(from, to, time.Hour, "_1h", e) }},
		simWrite{db + "/tpsmon_1d", func(e func(*write.Point) error) error { return fleet.Rollups(from, to, 24*time.Hour, "_1d", e) }})

	b, err := os.ReadFile(filepath.Join("..", "packaging", "grafana", "tpsmon.json"))
	if err != nil {
		t.Fatal(err)
	}
	d := parseDashboard(t, b)
	c := NewClient(base, db, "", 30*time.Second)
	ctx := context.Background()
	results := map[string][]influxql.Series{}
	for _, level := range []string{"1h", "1d"} {
		for _, p := range d.Panels {
			for i, tg := range p.Targets {
				// Grafana's substitutions: All for host, server and GPU,
				// the variables' defaults, an interval of an hour.
				q := strings.NewReplacer(
					"$timeFilter", fmt.Sprintf("time >= %dms AND time < %dms", from.UnixMilli(), to.UnixMilli()),
					"$__interval", "1h", "$host", ".*", "$server", ".*", "$gpu", ".*", "$state", "ok", "$level", level, "$per_user_floor", "20",
				).Replace(tg.Query)
				s, err := c.Query(ctx, q)
				if err != nil {
					t.Fatalf("panel %q: %v\n%s", p.Title, err, q)
				}
				if len(s) == 0 {
					t.Errorf("panel %q (level %s) returned nothing:\n%s", p.Title, level, q)
				}
				results[fmt.Sprint(level, "|", p.Title, "|", i)] = s
				results[level+"|"+p.Title] = append(results[level+"|"+p.Title], s...)
			}
		}
	}
	sum := func(key, col string) float64 {
		var v float64
		for _, s := range results[key] {
			for _, row := range s.Rows() {
				x, _ := influxql.Num(row[col])
				v += x
			}
		}
		return v
	}
	approx := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	// What was written, from the same model.
	var tokens, gpuSecs, lostRaw, ceilWins float64
	var throttled int
	_ = fleet.Raw(from, to, rawWindow, func(p *write.Point) error {
		if p.Name() == schema.Server {
			var c, o float64
			for _, f := range p.FieldList() {
				switch f.Key {
				case schema.FieldCeilingTPS:
					c = f.Value.(float64)
				case schema.FieldSystemTPS:
					o = f.Value.(float64)
				}
			}
			if c > 0 {
				lostRaw += max(0, c-o) * rawWindow.Seconds()
				ceilWins++
			}
		}
		for _, f := range p.FieldList() {
			switch {
			case p.Name() == schema.Server && f.Key == schema.FieldTokens:
				tokens += float64(f.Value.(int64))
			case p.Name() == schema.GPU && f.Key == schema.FieldWindowS:
				gpuSecs += f.Value.(float64)
			case p.Name() == schema.GPU && f.Key == schema.FieldThrottle && f.Value.(int64) > 0:
				throttled++
			}
		}
		return nil
	})
	approx("tokens per interval, summed", sum("1h|Tokens generated per interval", "tokens"), tokens)
	approx("tokens lost below the ceiling (raw)", sum("1h|Throughput lost below the ceiling, most first", schema.FieldLostTokens), lostRaw)
	approx("windows with a ceiling (raw)", sum("1h|Throughput lost below the ceiling, most first", schema.FieldCeilingWindows), ceilWins)
	var lostRolled float64
	_ = fleet.Rollups(from, to, time.Hour, "_1h", func(p *write.Point) error {
		for _, f := range p.FieldList() {
			if f.Key == schema.FieldLostTokens {
				lostRolled += f.Value.(float64)
			}
		}
		return nil
	})
	if lostRolled == 0 || lostRaw == 0 {
		t.Fatalf("the fleet lost nothing below its ceiling: raw %v, rollups %v", lostRaw, lostRolled)
	}
	approx("tokens lost below the ceiling (1h rollups)", sum("1h|Throughput lost below the ceiling, most first ($level rollups)", schema.FieldLostTokens), lostRolled)
	for _, s := range results["1h|Model bandwidth utilization (MBU)"] {
		for _, row := range s.Rows() {
			if v, ok := influxql.Num(row[schema.FieldMBU]); ok && (v <= 0 || v > 0.85+1e-9) {
				t.Errorf("MBU %v of %v: the fleet's is in (0, 0.85]", v, s.Tags)
			}
		}
	}
	approx("throttled windows", sum("1h|Throttled windows", "throttled_windows"), float64(throttled))
	approx("GPU time in the GPU table", sum("1h|GPU time, energy and mean utilization", "seconds"), gpuSecs)
	approx("unused GPU seconds (raw)", sum("1h|Unused GPU time per host", "seconds"), 2*24*3600)
	// The curve panel's floor line: every point at x = the floor, up to
	// the highest system TPS written.
	var floorRows int
	var floorTop float64
	for _, s := range results["1h|Operating curve: system against per-user tokens per second|1"] {
		for _, row := range s.Rows() {
			x, _ := influxql.Num(row[colFloor])
			y, _ := influxql.Num(row[colFloorSystemTPS])
			if x != 20 {
				t.Errorf("floor line point at x = %v, want 20", x)
			}
			floorRows, floorTop = floorRows+1, math.Max(floorTop, y)
		}
	}
	var topTPS float64
	_ = fleet.Raw(from, to, rawWindow, func(p *write.Point) error {
		for _, f := range p.FieldList() {
			if p.Name() == schema.Server && f.Key == schema.FieldSystemTPS {
				topTPS = math.Max(topTPS, f.Value.(float64))
			}
		}
		return nil
	})
	if floorRows < 2 || floorTop != topTPS {
		t.Errorf("floor line: %d points up to %v, want a line up to the highest system TPS %v", floorRows, floorTop, topTPS)
	}
	approx("unused GPUs table", sum("1h|GPUs no server uses, longest first", "seconds"), 2*24*3600)
	for _, level := range []string{"1h", "1d"} {
		var stateH float64
		for _, st := range States {
			stateH += sum(level+"|GPU-hours per state", st)
		}
		stateH += sum(level+"|GPU-hours per state", "unused")
		approx(level+" GPU-hours per state, stacked", stateH, 20*24)
	}
	// Fleet tokens per second from the hourly rollups is the raw windows'
	// tokens over the same hours, but for the windows' whole-token rounding.
	if got := sum("1h|Fleet tokens per second", "tokens_per_second") * 3600; math.Abs(got-tokens) > 1e-5*tokens {
		t.Errorf("fleet tokens/s × 3600 from the rollups: %v, raw tokens %v", got, tokens)
	}
}

// TestDashboardRangesWereMeasured checks that every panel's default range
// (the dashboard's, or the panel's relative time) is the one
// bench/reportscale -dashboard timed it over at fleet scale, as written in
// bench/RESULTS.md's dashboard section: a panel whose range changes
// without being timed again fails here.
func TestDashboardRangesWereMeasured(t *testing.T) {
	b, err := Dashboard()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Time   struct{ From, To string }
		Panels []struct {
			Title, Type, TimeFrom, TimeShift string
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Time.To != "now" {
		t.Fatalf("dashboard ends at %q, want now", d.Time.To)
	}
	res, err := os.ReadFile(filepath.Join("..", "bench", "RESULTS.md"))
	if err != nil {
		t.Fatal(err)
	}
	measured := measuredRanges(t, string(res))
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		want := strings.TrimPrefix(d.Time.From, "now-")
		if p.TimeFrom != "" {
			want = strings.TrimPrefix(p.TimeFrom, "now-")
		}
		if p.TimeShift != "" {
			t.Errorf("panel %q: time shift %s, which the harness's table has no column for", p.Title, p.TimeShift)
		}
		span := grafanaSpan(t, want)
		got, ok := measured[p.Title]
		if !ok {
			t.Errorf("panel %q is not in bench/RESULTS.md's dashboard table: run go run ./bench/reportscale -dashboard packaging/grafana/tpsmon.json", p.Title)
			continue
		}
		if !slices.Contains(got, span) {
			t.Errorf("panel %q: default range %s, measured over %v", p.Title, want, got)
		}
	}
}

// measuredRanges reads the panel and range columns of the dashboard
// section's table.
func measuredRanges(t *testing.T, results string) map[string][]time.Duration {
	t.Helper()
	const open, closing = "<!-- dashboard-scale", "<!-- /dashboard-scale -->"
	i, j := strings.Index(results, open), strings.Index(results, closing)
	if i < 0 || j < i {
		t.Fatal("bench/RESULTS.md has no dashboard-scale section")
	}
	out := map[string][]time.Duration{}
	for _, l := range strings.Split(results[i:j], "\n") {
		cells := strings.Split(l, " | ")
		if len(cells) < 3 || !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| panel ") || strings.HasPrefix(l, "| loaded ") {
			continue
		}
		title, span := strings.TrimPrefix(cells[0], "| "), cells[1]
		if strings.Contains(span, " ") || strings.Contains(cells[2], "points/s") {
			continue // shifted ranges, or the loads' table
		}
		if _, err := strconv.Atoi(span); err == nil {
			continue // the loads' table: a count of points
		}
		out[title] = append(out[title], grafanaSpan(t, span))
	}
	if len(out) == 0 {
		t.Fatal("bench/RESULTS.md's dashboard-scale section lists no panel")
	}
	return out
}

// grafanaSpan reads Grafana's and the harness's durations: 6h, 1d, 7d, 30m.
func grafanaSpan(t *testing.T, s string) time.Duration {
	t.Helper()
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
	if len(s) < 2 {
		t.Fatalf("range %q: want a number and s, m, h, d or w", s)
	}
	n, err := strconv.Atoi(s[:len(s)-1])
	u, ok := units[s[len(s)-1]]
	if err != nil || !ok {
		t.Fatalf("range %q: want a number and s, m, h, d or w", s)
	}
	return time.Duration(n) * u
}
