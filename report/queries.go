// Package report reads tpsmon's series back from InfluxDB with InfluxQL and
// turns them into findings: where GPU-hours go to waste, and why. The
// queries are the Grafana dashboard's own (packaging/grafana), with its
// variables filled in, so the report and the dashboard agree on every
// number they both show.
package report

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/schema"
)

// Query is one InfluxQL query of the dashboard, written with Grafana's
// variables: $timeFilter, $__interval, $host, $server, $gpu, and $level
// (1h or 1d) for the rollups. Text reads the raw windows; Rollup, where
// set, reads the same quantities from the hourly or daily rollups under
// the same column names.
type Query struct {
	Name   string
	Text   string
	Rollup string
}

const (
	rawServer    = `"` + schema.Server + `"`
	rawGPU       = `"` + schema.GPU + `"`
	rollupServer = `"tpsmon_$level"."` + schema.Server + `_$level"`
	rollupGPU    = `"tpsmon_$level"."` + schema.GPU + `_$level"`
	serverWhere  = `WHERE $timeFilter AND "host" =~ /^$host$/ AND "server" =~ /^$server$/`
	gpuWhere     = `WHERE $timeFilter AND "host" =~ /^$host$/ AND "gpu" =~ /^$gpu$/`
)

// Time observed: the raw windows carry their length (window_s); older
// points do not, and count among windows but not among timed, for the
// report to price at the length read from their spacing. Rollups carry
// seconds, all of them timed.
const (
	rawTime    = `count("coverage") AS "windows", sum("window_s") AS "seconds", count("window_s") AS "timed"`
	rollupTime = `sum("windows") AS "windows", sum("seconds") AS "seconds", sum("windows") AS "timed"`
)

func both(name, sel, rawFrom, rollFrom, rest string) Query {
	return Query{Name: name,
		Text:   "SELECT " + sel + " FROM " + rawFrom + " " + rest,
		Rollup: "SELECT " + sel + " FROM " + rollFrom + " " + rest}
}

// The dashboard's queries.
var (
	ServerSeries = both("server_series",
		`mean("system_tps") AS "system_tps", mean("per_user_tps") AS "per_user_tps", mean("running") AS "running", mean("waiting") AS "waiting", mean("gpu_util") AS "gpu_util", mean("sm_active") AS "sm_active"`,
		rawServer, rollupServer, serverWhere+` GROUP BY time($__interval), "host", "server" fill(none)`)
	TokensPerJoule = both("tokens_per_joule", `sum("tokens") / sum("energy_j") AS "tokens_per_joule"`,
		rawServer, rollupServer, serverWhere+` GROUP BY "host", "server"`)
	Ranking = both("ranking", `mean("tps_per_gpu") * 3600 AS "tokens_per_gpu_hour", sum("tokens") AS "tokens"`,
		rawServer, rollupServer, serverWhere+` GROUP BY "host", "server"`)
	StateTimeline = Query{Name: "state_timeline", Text: `SELECT last("state") AS "state" FROM ` + rawServer + ` ` + serverWhere + ` GROUP BY time($__interval), "host", "server" fill(none)`}
	// StateTime is each server's time in $state, with its GPUs (the gpus tag).
	StateTime = Query{Name: "state_time",
		Text:   `SELECT ` + rawTime + ` FROM ` + rawServer + ` ` + serverWhere + ` AND "state" = '$state' GROUP BY "host", "server", "gpus"`,
		Rollup: `SELECT sum("$state_windows") AS "windows", sum("$state_seconds") AS "seconds", sum("$state_windows") AS "timed" FROM ` + rollupServer + ` ` + serverWhere + ` GROUP BY "host", "server", "gpus"`}
	// StateTrend is the fleet's time in $state per interval.
	StateTrend = Query{Name: "state_trend",
		Text:   `SELECT ` + rawTime + ` FROM ` + rawServer + ` ` + serverWhere + ` AND "state" = '$state' GROUP BY time($__interval), "host", "gpus" fill(none)`,
		Rollup: `SELECT sum("$state_windows") AS "windows", sum("$state_seconds") AS "seconds", sum("$state_windows") AS "timed" FROM ` + rollupServer + ` ` + serverWhere + ` GROUP BY time($__interval), "host", "gpus" fill(none)`}
	// GPUTime is each GPU's observed time, energy and mean utilization,
	// with the servers it served (server tag; empty: none).
	GPUTime = Query{Name: "gpu_time",
		Text:   `SELECT ` + rawTime + `, mean("util") AS "util", sum("energy_j") AS "energy_j" FROM ` + rawGPU + ` ` + gpuWhere + ` GROUP BY "host", "gpu", "uuid", "name", "server"`,
		Rollup: `SELECT ` + rollupTime + `, mean("util") AS "util", sum("energy_j") AS "energy_j" FROM ` + rollupGPU + ` ` + gpuWhere + ` GROUP BY "host", "gpu", "uuid", "name", "server"`}
	// GPUIdle counts each GPU's windows under 5 % utilization.
	GPUIdle = Query{Name: "gpu_idle",
		Text:   `SELECT count("coverage") AS "idle_windows" FROM ` + rawGPU + ` ` + gpuWhere + ` AND "util" < 5 GROUP BY "host", "gpu", "uuid", "server"`,
		Rollup: `SELECT sum("idle_windows") AS "idle_windows" FROM ` + rollupGPU + ` ` + gpuWhere + ` GROUP BY "host", "gpu", "uuid", "server"`}
	// UnusedGPUs are GPUs no server uses, with their time.
	UnusedGPUs = Query{Name: "unused_gpus",
		Text:   `SELECT ` + rawTime + `, mean("util") AS "util", max("util_max") AS "util_max" FROM ` + rawGPU + ` ` + gpuWhere + ` AND "server" = '' GROUP BY "host", "gpu", "uuid"`,
		Rollup: `SELECT ` + rollupTime + `, mean("util") AS "util", max("util_max") AS "util_max" FROM ` + rollupGPU + ` ` + gpuWhere + ` AND "server" = '' GROUP BY "host", "gpu", "uuid"`}
	// UnusedTrend is the unused GPUs' time per interval.
	UnusedTrend = Query{Name: "unused_trend",
		Text:   `SELECT ` + rawTime + ` FROM ` + rawGPU + ` ` + gpuWhere + ` AND "server" = '' GROUP BY time($__interval), "host" fill(none)`,
		Rollup: `SELECT ` + rollupTime + ` FROM ` + rollupGPU + ` ` + gpuWhere + ` AND "server" = '' GROUP BY time($__interval), "host" fill(none)`}
	// FleetTokens and FleetGPU are the fleet per interval: tokens, and
	// every GPU's time and energy.
	FleetTokens = both("fleet_tokens", `sum("tokens") AS "tokens"`, rawServer, rollupServer, serverWhere+` GROUP BY time($__interval) fill(none)`)
	FleetGPU    = Query{Name: "fleet_gpu",
		Text:   `SELECT ` + rawTime + `, sum("energy_j") AS "energy_j" FROM ` + rawGPU + ` ` + gpuWhere + ` GROUP BY time($__interval), "host" fill(none)`,
		Rollup: `SELECT ` + rollupTime + `, sum("energy_j") AS "energy_j" FROM ` + rollupGPU + ` ` + gpuWhere + ` GROUP BY time($__interval), "host" fill(none)`}
)

// Per GPU, over time: the readings the daemon writes and the report
// summarises.
var (
	GPUSeries = Query{Name: "gpu_series",
		Text: `SELECT mean("util") AS "util", mean("sm_active") AS "sm_active", max("mem_used_bytes") AS "mem_used_bytes", mean("power_w") AS "power_w", max("temp_c") AS "temp_c", mean("sm_clock_mhz") AS "sm_clock_mhz" FROM ` + rawGPU + ` ` + gpuWhere + ` GROUP BY time($__interval), "host", "gpu", "uuid" fill(none)`}
	// GPUThrottle counts windows in which a GPU was throttled for any reason.
	GPUThrottle = Query{Name: "gpu_throttle",
		Text: `SELECT count("throttle") AS "throttled_windows" FROM ` + rawGPU + ` ` + gpuWhere + ` AND "throttle" > 0 GROUP BY time($__interval), "host", "gpu", "uuid" fill(none)`}
)

// The fleet over time, for ranges of weeks and months: read from the
// rollups, whose seconds and GPU-seconds make the ratios exact.
var (
	// FleetTPS is the fleet's tokens per second: each server's mean rate
	// per interval, summed.
	FleetTPS = Query{Name: "fleet_tps",
		Text:   `SELECT sum("system_tps") AS "tokens_per_second" FROM (SELECT mean("system_tps") AS "system_tps" FROM ` + rawServer + ` ` + serverWhere + ` GROUP BY time($__interval), "host", "server") WHERE $timeFilter GROUP BY time($__interval) fill(none)`,
		Rollup: `SELECT sum("system_tps") AS "tokens_per_second" FROM (SELECT mean("system_tps") AS "system_tps" FROM ` + rollupServer + ` ` + serverWhere + ` GROUP BY time($__interval), "host", "server") WHERE $timeFilter GROUP BY time($__interval) fill(none)`}
	// FleetEfficiency is tokens per GPU-hour of the GPUs serving, and per joule.
	FleetEfficiency = Query{Name: "fleet_efficiency",
		Rollup: `SELECT sum("tokens") / sum("gpu_seconds") * 3600 AS "tokens_per_gpu_hour", sum("tokens") / sum("energy_j") AS "tokens_per_joule" FROM ` + rollupServer + ` ` + serverWhere + ` GROUP BY time($__interval) fill(none)`}
	// StateHoursTrend is the GPU-hours of the GPUs serving, per state.
	StateHoursTrend = Query{Name: "state_hours", Rollup: stateHoursText()}
	// UnusedHours is the GPU-hours of GPUs no server uses.
	UnusedHours = Query{Name: "unused_hours",
		Rollup: `SELECT sum("gpu_seconds") / 3600 AS "unused" FROM ` + rollupGPU + ` ` + gpuWhere + ` AND "server" = '' GROUP BY time($__interval) fill(none)`}
)

func stateHoursText() string {
	var sel []string
	for _, st := range States {
		sel = append(sel, fmt.Sprintf(`sum("%s_gpu_seconds") / 3600 AS "%s"`, st, st))
	}
	return `SELECT ` + strings.Join(sel, ", ") + ` FROM ` + rollupServer + ` ` + serverWhere + ` GROUP BY time($__interval) fill(none)`
}

// What one user feels, per server over time (raw windows): the latency
// quantiles (a mean of windows' quantiles is no quantile of the interval,
// so the panels take the interval's worst window: max), and the
// attainment's bounds.
var LatencySeries = Query{Name: "latency_series",
	Text: `SELECT max("ttft_p50_s") AS "ttft_p50_s", max("ttft_p90_s") AS "ttft_p90_s", max("ttft_p99_s") AS "ttft_p99_s", max("itl_p50_s") AS "itl_p50_s", max("itl_p90_s") AS "itl_p90_s", max("itl_p99_s") AS "itl_p99_s", min("slo_attainment_lo") AS "slo_attainment_lo", min("slo_attainment_hi") AS "slo_attainment_hi", mean("goodput_rps_lo") AS "goodput_rps_lo" FROM ` + rawServer + ` ` + serverWhere + ` GROUP BY time($__interval), "host", "server" fill(none)`}

// Queries lists every query the dashboard and the report share.
var Queries = []Query{ServerSeries, TokensPerJoule, Ranking, StateTimeline, StateTime, StateTrend, GPUTime, GPUIdle, UnusedGPUs,
	UnusedTrend, FleetTokens, FleetGPU, GPUSeries, GPUThrottle, FleetTPS, FleetEfficiency, StateHoursTrend, UnusedHours,
	LatencySeries}

// States are the verdicts of design §5.
var States = schema.States

// Unused is the state of a GPU no server uses.
const Unused = "unused"

// Levels of series a report reads: the raw windows, or a rollup.
const (
	Raw    = "raw"
	Hourly = "1h"
	Daily  = "1d"
)

// Filter fills the dashboard's variables.
type Filter struct {
	From, To time.Time
	Host     string // empty: all
	Server   string // empty: all
	GPU      string // empty: all
	Interval time.Duration
	// Level is Raw (or empty), Hourly or Daily.
	Level string
}

var ident = regexp.MustCompile(`^[A-Za-z0-9_.:/-]*$`)

// Render fills a query's variables; state fills $state. At a rollup level
// it renders the query's Rollup text.
func (f Filter) Render(q Query, state string) (string, error) {
	for name, v := range map[string]string{"host": f.Host, "server": f.Server, "gpu": f.GPU, "state": state} {
		if !ident.MatchString(v) {
			return "", fmt.Errorf("report: --%s %q: only letters, digits and . _ : - are allowed", name, v)
		}
	}
	text := q.Text
	switch f.Level {
	case "", Raw:
		if text == "" {
			return "", fmt.Errorf("report: %s reads only rollups", q.Name)
		}
	case Hourly, Daily:
		if q.Rollup == "" {
			return "", fmt.Errorf("report: %s has no rollup form", q.Name)
		}
		text = q.Rollup
	default:
		return "", fmt.Errorf("report: level %q: want raw, 1h or 1d", f.Level)
	}
	re := func(v string) string {
		if v == "" {
			return ".*"
		}
		return regexp.QuoteMeta(v)
	}
	interval := f.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	r := strings.NewReplacer(
		"$timeFilter", fmt.Sprintf("time >= %dms AND time < %dms", f.From.UnixMilli(), f.To.UnixMilli()),
		"$__interval", fmt.Sprintf("%ds", max(1, int(interval.Seconds()))),
		"$host", re(f.Host),
		"$server", re(f.Server),
		"$gpu", re(f.GPU),
		"$state", state,
		"$level", f.Level,
	)
	return r.Replace(text), nil
}
