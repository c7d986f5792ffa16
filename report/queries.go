// Package report reads tpsmon's series back from InfluxDB with InfluxQL and
// turns them into findings: where GPU-hours go to waste, and why. The
// queries are the Grafana dashboard's own (packaging/grafana), with its
// variables filled in, so the report and the dashboard agree on every
// number they both show.
package report

import (
	"fmt"
	"regexp"
	"strconv"
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

// The query texts are assembled from schema's names (and the columns
// below), so that a renamed field or tag is a compile error here, not a
// query that silently returns nothing. Grafana's variables ($timeFilter,
// $host, ...) are the dashboard's and stay text.

// id quotes an InfluxQL identifier: a measurement, tag, field or column.
func id(name string) string { return `"` + name + `"` }

// call is fn("field").
func call(fn, field string) string { return fn + "(" + id(field) + ")" }

// as is fn("field") AS "col"; same names the column after the field.
func as(fn, field, col string) string { return call(fn, field) + " AS " + id(col) }
func same(fn, field string) string    { return as(fn, field, field) }

// ids joins quoted names: a select or GROUP BY list of tags.
func ids(names ...string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = id(n)
	}
	return strings.Join(q, ", ")
}

// list joins select expressions.
func list(exprs ...string) string { return strings.Join(exprs, ", ") }

// Columns the queries return under names of their own (the others are
// named after the field they aggregate).
const (
	colWindows          = schema.FieldWindows
	colSeconds          = schema.FieldSeconds
	colTimed            = "timed" // windows that carry window_s
	colTokensPerGPUHour = "tokens_per_gpu_hour"
	colTokensPerSecond  = "tokens_per_second"
	colThrottled        = "throttled_windows"
)

// colIdleWindows counts a GPU's idle windows: the rollup's field of that
// name, and the raw query's column.
var colIdleWindows = schema.RollupField(schema.IdleGPU, schema.FieldWindows)

// stateField is a state's rollup field, for $state.
func stateField(field string) string { return schema.RollupField("$state", field) }

// idleGPU keeps the GPU windows under schema.IdleGPUUtil.
var idleGPU = fmt.Sprintf(" AND %s < %d", id(schema.FieldUtil), schema.IdleGPUUtil)

var (
	rawServer    = id(schema.Server)
	rawGPU       = id(schema.GPU)
	rollupServer = id("tpsmon_$level") + "." + id(schema.Server+"_$level")
	rollupGPU    = id("tpsmon_$level") + "." + id(schema.GPU+"_$level")
	serverWhere  = "WHERE $timeFilter AND " + id(schema.TagHost) + " =~ /^$host$/ AND " + id(schema.TagServer) + " =~ /^$server$/"
	gpuWhere     = "WHERE $timeFilter AND " + id(schema.TagHost) + " =~ /^$host$/ AND " + id(schema.TagGPU) + " =~ /^$gpu$/"
	inState      = " AND " + id(schema.FieldState) + " = '$state'"
	unused       = " AND " + id(schema.TagServer) + " = ''"
	perInterval  = " GROUP BY time($__interval), "
)

// Time observed: the raw windows carry their length (window_s); older
// points do not, and count among windows but not among timed, for the
// report to price at the length read from their spacing. Rollups carry
// seconds, all of them timed.
var (
	rawTime = list(as("count", schema.FieldCoverage, colWindows), as("sum", schema.FieldWindowS, colSeconds),
		as("count", schema.FieldWindowS, colTimed))
	rollupTime = list(as("sum", schema.FieldWindows, colWindows), as("sum", schema.FieldSeconds, colSeconds),
		as("sum", schema.FieldWindows, colTimed))
	// rollupSeconds is rollupTime without the windows, for the report's
	// sums per interval, which need only the seconds (every rollup window
	// is timed): InfluxDB's cost is per field read, and a third field
	// was 40 % of the fleet's GPU time per interval over 30 days.
	rollupSeconds = as("sum", schema.FieldSeconds, colSeconds)
	stateTime     = list(as("sum", stateField(schema.FieldWindows), colWindows), as("sum", stateField(schema.FieldSeconds), colSeconds),
		as("sum", stateField(schema.FieldWindows), colTimed))
)

func both(name, sel, rawFrom, rollFrom, rest string) Query {
	return Query{Name: name,
		Text:   "SELECT " + sel + " FROM " + rawFrom + " " + rest,
		Rollup: "SELECT " + sel + " FROM " + rollFrom + " " + rest}
}

// The dashboard's queries.
var (
	// ServerSeries is what the report charts per server (the dashboard's
	// panels read ServerTPS, ... a quantity at a time).
	ServerSeries = both("server_series",
		list(same("mean", schema.FieldSystemTPS), same("mean", schema.FieldPerUserTPS), same("mean", schema.FieldRunning),
			same("mean", schema.FieldGPUUtil)),
		rawServer, rollupServer, serverWhere+perInterval+ids(schema.TagHost, schema.TagServer)+" fill(none)")
	TokensPerJoule = both("tokens_per_joule", call("sum", schema.FieldTokens)+" / "+call("sum", schema.FieldEnergyJ)+" AS "+id(schema.FieldTokensPerJoule),
		rawServer, rollupServer, serverWhere+" GROUP BY "+ids(schema.TagHost, schema.TagServer))
	Ranking = both("ranking", list(call("mean", schema.FieldTPSPerGPU)+" * 3600 AS "+id(colTokensPerGPUHour), same("sum", schema.FieldTokens)),
		rawServer, rollupServer, serverWhere+" GROUP BY "+ids(schema.TagHost, schema.TagServer))
	StateTimeline = Query{Name: "state_timeline", Text: "SELECT " + same("last", schema.FieldState) + " FROM " + rawServer + " " + serverWhere + perInterval + ids(schema.TagHost, schema.TagServer) + " fill(none)"}
	// StateTime is each server's time in $state, with its GPUs (the gpus tag).
	StateTime = Query{Name: "state_time",
		Text:   "SELECT " + rawTime + " FROM " + rawServer + " " + serverWhere + inState + " GROUP BY " + ids(schema.TagHost, schema.TagServer, schema.TagGPUs),
		Rollup: "SELECT " + stateTime + " FROM " + rollupServer + " " + serverWhere + " GROUP BY " + ids(schema.TagHost, schema.TagServer, schema.TagGPUs)}
	// StateTrend is the fleet's time in $state per interval.
	StateTrend = Query{Name: "state_trend",
		Text:   "SELECT " + rawTime + " FROM " + rawServer + " " + serverWhere + inState + perInterval + ids(schema.TagHost, schema.TagGPUs) + " fill(none)",
		Rollup: "SELECT " + as("sum", stateField(schema.FieldSeconds), colSeconds) + " FROM " + rollupServer + " " + serverWhere + perInterval + ids(schema.TagHost, schema.TagGPUs) + " fill(none)"}
	// GPUTime is each GPU's observed time, energy and mean utilization,
	// with the servers it served (server tag; empty: none).
	GPUTime = Query{Name: "gpu_time",
		Text:   "SELECT " + list(rawTime, same("mean", schema.FieldUtil), same("sum", schema.FieldEnergyJ)) + " FROM " + rawGPU + " " + gpuWhere + " GROUP BY " + ids(schema.TagHost, schema.TagGPU, schema.TagUUID, schema.TagName, schema.TagServer),
		Rollup: "SELECT " + list(rollupTime, same("mean", schema.FieldUtil), same("sum", schema.FieldEnergyJ)) + " FROM " + rollupGPU + " " + gpuWhere + " GROUP BY " + ids(schema.TagHost, schema.TagGPU, schema.TagUUID, schema.TagName, schema.TagServer)}
	// GPUIdle counts each GPU's windows under 5 % utilization.
	GPUIdle = Query{Name: "gpu_idle",
		Text:   "SELECT " + as("count", schema.FieldCoverage, colIdleWindows) + " FROM " + rawGPU + " " + gpuWhere + idleGPU + " GROUP BY " + ids(schema.TagHost, schema.TagGPU, schema.TagUUID, schema.TagServer),
		Rollup: "SELECT " + same("sum", colIdleWindows) + " FROM " + rollupGPU + " " + gpuWhere + " GROUP BY " + ids(schema.TagHost, schema.TagGPU, schema.TagUUID, schema.TagServer)}
	// UnusedGPUs are GPUs no server uses, with their time.
	UnusedGPUs = Query{Name: "unused_gpus",
		Text:   "SELECT " + list(rawTime, same("mean", schema.FieldUtil), same("max", schema.FieldUtilMax)) + " FROM " + rawGPU + " " + gpuWhere + unused + " GROUP BY " + ids(schema.TagHost, schema.TagGPU, schema.TagUUID),
		Rollup: "SELECT " + list(rollupTime, same("mean", schema.FieldUtil), same("max", schema.FieldUtilMax)) + " FROM " + rollupGPU + " " + gpuWhere + unused + " GROUP BY " + ids(schema.TagHost, schema.TagGPU, schema.TagUUID)}
	// UnusedTrend is the unused GPUs' time per interval.
	UnusedTrend = Query{Name: "unused_trend",
		Text:   "SELECT " + rawTime + " FROM " + rawGPU + " " + gpuWhere + unused + perInterval + ids(schema.TagHost) + " fill(none)",
		Rollup: "SELECT " + rollupSeconds + " FROM " + rollupGPU + " " + gpuWhere + unused + perInterval + ids(schema.TagHost) + " fill(none)"}
	// FleetTokens and FleetGPU are the fleet per interval: tokens, and
	// every GPU's time and energy.
	FleetTokens = both("fleet_tokens", same("sum", schema.FieldTokens), rawServer, rollupServer, serverWhere+" GROUP BY time($__interval) fill(none)")
	FleetGPU    = Query{Name: "fleet_gpu",
		Text:   "SELECT " + list(rawTime, same("sum", schema.FieldEnergyJ)) + " FROM " + rawGPU + " " + gpuWhere + perInterval + ids(schema.TagHost) + " fill(none)",
		Rollup: "SELECT " + list(rollupSeconds, same("sum", schema.FieldEnergyJ)) + " FROM " + rollupGPU + " " + gpuWhere + perInterval + ids(schema.TagHost) + " fill(none)"}
	// FleetEnergy and GPUTable are what the dashboard's panels draw of
	// FleetGPU and GPUTime (the report's): a column fewer of 1,600 GPUs.
	FleetEnergy = Query{Name: "fleet_energy",
		Text: "SELECT " + same("sum", schema.FieldEnergyJ) + " FROM " + rawGPU + " " + gpuWhere + perInterval + ids(schema.TagHost) + " fill(none)"}
	GPUTable = Query{Name: "gpu_table",
		Text: "SELECT " + list(as("count", schema.FieldCoverage, colWindows), as("sum", schema.FieldWindowS, colSeconds), same("mean", schema.FieldUtil), same("sum", schema.FieldEnergyJ)) +
			" FROM " + rawGPU + " " + gpuWhere + " GROUP BY " + ids(schema.TagHost, schema.TagGPU, schema.TagUUID, schema.TagName, schema.TagServer)}
)

// gpuReading is one reading of every GPU over time, fn of field per
// interval: each per-GPU panel draws one, and a query of all six would
// read and send six times the points (1,600 GPUs: seconds, not one).
func gpuReading(fn, field string) Query {
	return Query{Name: "gpu_" + field,
		Text: "SELECT " + same(fn, field) + " FROM " + rawGPU + " " + gpuWhere + perInterval + ids(schema.TagHost, schema.TagGPU, schema.TagUUID) + " fill(none)"}
}

// Per GPU, over time: the readings the daemon writes and the report
// summarises.
var (
	GPUUtil     = gpuReading("mean", schema.FieldUtil)
	GPUSMActive = gpuReading("mean", schema.FieldSMActive)
	GPUMemUsed  = gpuReading("max", schema.FieldMemUsedBytes)
	GPUPower    = gpuReading("mean", schema.FieldPowerW)
	GPUTemp     = gpuReading("max", schema.FieldTempC)
	GPUSMClock  = gpuReading("mean", schema.FieldSMClockMHz)
	// GPUThrottle counts windows in which a GPU was throttled for any reason.
	GPUThrottle = Query{Name: "gpu_throttle",
		Text: "SELECT " + as("count", schema.FieldThrottle, colThrottled) + " FROM " + rawGPU + " " + gpuWhere + " AND " + id(schema.FieldThrottle) + " > 0" +
			perInterval + ids(schema.TagHost, schema.TagGPU, schema.TagUUID) + " fill(none)"}
)

// fleetTPS sums each server's mean rate per interval, read from from.
func fleetTPS(from string) string {
	return "SELECT " + as("sum", schema.FieldSystemTPS, colTokensPerSecond) + " FROM (SELECT " + same("mean", schema.FieldSystemTPS) +
		" FROM " + from + " " + serverWhere + perInterval + ids(schema.TagHost, schema.TagServer) + ") WHERE $timeFilter GROUP BY time($__interval) fill(none)"
}

// The fleet over time, for ranges of weeks and months: read from the
// rollups, whose seconds and GPU-seconds make the ratios exact.
var (
	// FleetTPS is the fleet's tokens per second: each server's mean rate
	// per interval, summed.
	FleetTPS = Query{Name: "fleet_tps", Text: fleetTPS(rawServer), Rollup: fleetTPS(rollupServer)}
	// FleetEfficiency is tokens per GPU-hour of the GPUs serving, and per joule.
	FleetEfficiency = Query{Name: "fleet_efficiency",
		Rollup: "SELECT " + list(call("sum", schema.FieldTokens)+" / "+call("sum", schema.FieldGPUSeconds)+" * 3600 AS "+id(colTokensPerGPUHour),
			call("sum", schema.FieldTokens)+" / "+call("sum", schema.FieldEnergyJ)+" AS "+id(schema.FieldTokensPerJoule)) +
			" FROM " + rollupServer + " " + serverWhere + " GROUP BY time($__interval) fill(none)"}
	// StateHoursTrend is the GPU-hours of the GPUs serving, per state.
	StateHoursTrend = Query{Name: "state_hours", Rollup: stateHoursText()}
	// UnusedHours is the GPU-hours of GPUs no server uses.
	UnusedHours = Query{Name: "unused_hours",
		Rollup: "SELECT " + call("sum", schema.FieldGPUSeconds) + " / 3600 AS " + id(Unused) + " FROM " + rollupGPU + " " + gpuWhere + unused + " GROUP BY time($__interval) fill(none)"}
)

func stateHoursText() string {
	var sel []string
	for _, st := range States {
		sel = append(sel, call("sum", schema.RollupField(st, schema.FieldGPUSeconds))+" / 3600 AS "+id(st))
	}
	return "SELECT " + list(sel...) + " FROM " + rollupServer + " " + serverWhere + " GROUP BY time($__interval) fill(none)"
}

// serverReading is each server over time, sel per interval: what one
// dashboard panel draws. A panel reads only its own columns: at 200
// servers the points a query sends cost InfluxDB most of its time.
func serverReading(name string, sel ...string) Query {
	return Query{Name: name, Text: "SELECT " + list(sel...) + " FROM " + rawServer + " " + serverWhere + perInterval + ids(schema.TagHost, schema.TagServer) + " fill(none)"}
}

// The servers' panels: rates, concurrency, their GPUs (ServerSeries, the
// report's, reads them together).
var (
	ServerTPS        = serverReading("server_tps", same("mean", schema.FieldSystemTPS))
	ServerPerUserTPS = serverReading("server_per_user_tps", same("mean", schema.FieldPerUserTPS))
	ServerRequests   = serverReading("server_requests", same("mean", schema.FieldRunning), same("mean", schema.FieldWaiting))
	ServerGPUs       = serverReading("server_gpus", same("mean", schema.FieldGPUUtil), same("mean", schema.FieldSMActive))
)

// What one user feels, per server over time (raw windows): the latency
// quantiles (a mean of windows' quantiles is no quantile of the interval,
// so the panels take the interval's worst window: max), the attainment's
// bounds (its lowest window) and goodput.
var (
	TTFTSeries    = serverReading("ttft_series", same("max", schema.FieldTTFTP50), same("max", schema.FieldTTFTP90), same("max", schema.FieldTTFTP99))
	ITLSeries     = serverReading("itl_series", same("max", schema.FieldITLP50), same("max", schema.FieldITLP90), same("max", schema.FieldITLP99))
	SLOSeries     = serverReading("slo_series", same("min", schema.FieldSLOAttainmentLo), same("min", schema.FieldSLOAttainmentHi))
	GoodputSeries = serverReading("goodput_series", same("mean", schema.FieldGoodputRPSLo))
)

// Each server's decode ceiling over time: MBU, and the ceiling with the
// observed rate it bounds (means over the interval of the windows that
// carry them).
var (
	MBUSeries     = serverReading("mbu_series", same("mean", schema.FieldMBU))
	CeilingSeries = serverReading("ceiling_series", same("mean", schema.FieldCeilingTPS), same("mean", schema.FieldSystemTPS))
)

// Columns of CeilingTerms beside the schema's rollup names.
const (
	ColCeilingTokens = "ceiling_tokens" // ceiling_tps × window_s
	ColMBUWeighted   = "mbu_x_seconds"  // mbu × window_s
)

// x is a field expression as a select column.
func x(expr, col string) string { return expr + " AS " + id(col) }

// posPart is max(0, e): InfluxQL has abs() but no max of two values.
func posPart(e string) string { return "((" + e + ") + abs(" + e + ")) / 2" }

// The raw windows' terms of the lost throughput and the time-weighted
// MBU and ceiling, one row per window, under the schema's rollup names: a
// field missing from a window leaves its terms null, so a window without
// a ceiling counts only among windows.
var (
	ceilTPS, obsTPS, winS = id(schema.FieldCeilingTPS), id(schema.FieldSystemTPS), id(schema.FieldWindowS)
	ceilGap               = ceilTPS + " - " + obsTPS

	termLostTokens     = x(posPart(ceilGap)+" * "+winS, schema.FieldLostTokens)
	termAboveCeiling   = x(posPart(obsTPS+" - "+ceilTPS)+" * "+winS, schema.FieldAboveCeilingTokens)
	termLostSeconds    = x(posPart("1 - "+obsTPS+" / "+ceilTPS)+" * "+winS, schema.FieldLostSeconds)
	termCeilingWindows = x(ceilTPS+" * 0 + "+winS+" * 0 + 1", schema.FieldCeilingWindows)
	termWindows        = x(id(schema.FieldCoverage)+" * 0 + 1", schema.FieldWindows)
)

// CeilingTerms are every term, which package rollup sums per period.
var CeilingTerms = list(termLostTokens, termAboveCeiling, termLostSeconds,
	x(ceilTPS+" * "+winS, ColCeilingTokens),
	x(ceilTPS+" * 0 + "+winS, schema.FieldCeilingSeconds),
	termCeilingWindows,
	x(id(schema.FieldMBU)+" * "+winS, ColMBUWeighted),
	x(id(schema.FieldMBU)+" * 0 + "+winS, schema.FieldMBUSeconds),
	termWindows)

// lostRollup are the same terms from the rollups, which sum them per
// period.
var lostRollup = list(id(schema.FieldLostTokens), id(schema.FieldAboveCeilingTokens), id(schema.FieldLostSeconds),
	x(id(schema.FieldCeilingTPS)+" * "+id(schema.FieldCeilingSeconds), ColCeilingTokens), id(schema.FieldCeilingSeconds),
	id(schema.FieldCeilingWindows), x(id(schema.FieldMBU)+" * "+id(schema.FieldMBUSeconds), ColMBUWeighted),
	id(schema.FieldMBUSeconds), id(schema.FieldWindows))

// lostOf sums the inner terms' columns (outer) over the range per server
// and GPU set.
func lostOf(outer, inner, from string) string {
	by := ids(schema.TagHost, schema.TagServer, schema.TagGPUs)
	return "SELECT " + outer + " FROM (SELECT " + inner + " FROM " + from + " " + serverWhere + " GROUP BY " + by + ") WHERE $timeFilter GROUP BY " + by
}

// LostThroughput is what each server's windows fell short of their
// decode ceiling over the range, in one query: tokens, the share of time
// that stands for, and the time-weighted MBU (schema's lost_* fields).
var LostThroughput = Query{Name: "lost_throughput",
	Text: lostOf(lostSums, CeilingTerms, rawServer), Rollup: lostOf(lostSums, lostRollup, rollupServer)}

var lostSums = list(same("sum", schema.FieldLostTokens), same("sum", schema.FieldAboveCeilingTokens), same("sum", schema.FieldLostSeconds),
	same("sum", ColCeilingTokens), same("sum", schema.FieldCeilingSeconds), same("sum", schema.FieldCeilingWindows),
	call("sum", ColMBUWeighted)+" / "+call("sum", schema.FieldMBUSeconds)+" AS "+id(schema.FieldMBU), same("sum", schema.FieldMBUSeconds),
	same("sum", schema.FieldWindows))

// LostTable is what the dashboard's tables draw of LostThroughput: the
// lost tokens and seconds and the windows with and without a ceiling,
// the same sums of the same terms. Over raw windows InfluxDB computes
// every term of every window: four instead of nine make the raw table
// about twice as fast (bench/RESULTS.md).
var LostTable = func() Query {
	sums := list(same("sum", schema.FieldLostTokens), same("sum", schema.FieldLostSeconds), same("sum", schema.FieldCeilingWindows), same("sum", schema.FieldWindows))
	return Query{Name: "lost_table",
		Text:   lostOf(sums, list(termLostTokens, termLostSeconds, termCeilingWindows, termWindows), rawServer),
		Rollup: lostOf(sums, ids(schema.FieldLostTokens, schema.FieldLostSeconds, schema.FieldCeilingWindows, schema.FieldWindows), rollupServer)}
}()

// Queries lists every query the dashboard and the report run: the
// dashboard's panels each one of them, word for word, but ReportOnly.
var Queries = []Query{ServerSeries, TokensPerJoule, Ranking, StateTimeline, StateTime, StateTrend, GPUTime, GPUIdle, UnusedGPUs,
	UnusedTrend, FleetTokens, FleetGPU, FleetEnergy, GPUTable, GPUUtil, GPUSMActive, GPUMemUsed, GPUPower, GPUTemp, GPUSMClock, GPUThrottle,
	FleetTPS, FleetEfficiency, StateHoursTrend, UnusedHours, CurveWindows, CurveFloor, ServerTPS, ServerPerUserTPS, ServerRequests,
	ServerGPUs, TTFTSeries, ITLSeries, SLOSeries, GoodputSeries, MBUSeries, CeilingSeries, LostThroughput, LostTable}

// ReportOnly are the report's queries the dashboard reads a panel's
// columns at a time instead (ServerTPS, ..., FleetEnergy, GPUTable,
// LostTable): at 200 hosts every column sent is InfluxDB's time.
var ReportOnly = []Query{ServerSeries, FleetGPU, GPUTime, LostThroughput}

// SuspectWindows reads the raw windows a sanity rule doubted (their
// suspect field), for the report alone: rollups do not carry the field.
var SuspectWindows = Query{Name: "suspect_windows",
	Text: `SELECT "` + schema.FieldSuspect + `" FROM ` + rawServer + ` ` + serverWhere + ` AND "` + schema.FieldSuspect + `" =~ /./ GROUP BY "host", "server"`}

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
		"$per_user_floor", strconv.FormatFloat(DefaultPerUserFloor, 'g', -1, 64),
	)
	return r.Replace(text), nil
}
