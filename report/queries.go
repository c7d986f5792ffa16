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
// variables: $timeFilter, $__interval, $host, $server, $gpu.
type Query struct {
	Name string
	Text string
}

// The dashboard's queries.
var (
	ServerSeries   = Query{"server_series", `SELECT mean("system_tps") AS "system_tps", mean("per_user_tps") AS "per_user_tps", mean("running") AS "running", mean("waiting") AS "waiting", mean("gpu_util") AS "gpu_util", mean("sm_active") AS "sm_active" FROM "tpsmon_server" WHERE $timeFilter AND "host" =~ /^$host$/ AND "server" =~ /^$server$/ GROUP BY time($__interval), "host", "server" fill(none)`}
	TokensPerJoule = Query{"tokens_per_joule", `SELECT sum("tokens") / sum("energy_j") AS "tokens_per_joule" FROM "tpsmon_server" WHERE $timeFilter AND "host" =~ /^$host$/ AND "server" =~ /^$server$/ GROUP BY "host", "server"`}
	StateTimeline  = Query{"state_timeline", `SELECT last("state") AS "state" FROM "tpsmon_server" WHERE $timeFilter AND "host" =~ /^$host$/ AND "server" =~ /^$server$/ GROUP BY time($__interval), "host", "server" fill(none)`}
	StateWindows   = Query{"state_windows", `SELECT count("coverage") AS "windows" FROM "tpsmon_server" WHERE $timeFilter AND "host" =~ /^$host$/ AND "server" =~ /^$server$/ AND "state" = '$state' GROUP BY "host", "server", "gpus"`}
	UnusedGPUs     = Query{"unused_gpus", `SELECT mean("util") AS "util", max("util_max") AS "util_max", count("util") AS "windows" FROM "tpsmon_gpu" WHERE $timeFilter AND "host" =~ /^$host$/ AND "gpu" =~ /^$gpu$/ AND "server" = '' GROUP BY "host", "gpu", "uuid"`}
	GPUIdle        = Query{"gpu_idle", `SELECT count("util") AS "idle_windows" FROM "tpsmon_gpu" WHERE $timeFilter AND "host" =~ /^$host$/ AND "gpu" =~ /^$gpu$/ AND "util" < 5 GROUP BY "host", "gpu", "server"`}
	GPUWindows     = Query{"gpu_windows", `SELECT count("util") AS "windows", mean("util") AS "util" FROM "tpsmon_gpu" WHERE $timeFilter AND "host" =~ /^$host$/ AND "gpu" =~ /^$gpu$/ GROUP BY "host", "gpu", "server"`}
	Ranking        = Query{"ranking", `SELECT mean("tps_per_gpu") * 3600 AS "tokens_per_gpu_hour", sum("tokens") AS "tokens" FROM "tpsmon_server" WHERE $timeFilter AND "host" =~ /^$host$/ AND "server" =~ /^$server$/ GROUP BY "host", "server"`}
)

// Queries lists every query the dashboard and the report share.
var Queries = []Query{ServerSeries, TokensPerJoule, StateTimeline, StateWindows, UnusedGPUs, GPUIdle, GPUWindows, Ranking}

// States are the verdicts of design §5.
var States = schema.States

// Filter fills the dashboard's variables.
type Filter struct {
	From, To time.Time
	Host     string // empty: all
	Server   string // empty: all
	GPU      string // empty: all
	Interval time.Duration
}

var ident = regexp.MustCompile(`^[A-Za-z0-9_.:/-]*$`)

// Render fills a query's variables; state fills $state.
func (f Filter) Render(q Query, state string) (string, error) {
	for name, v := range map[string]string{"host": f.Host, "server": f.Server, "gpu": f.GPU, "state": state} {
		if !ident.MatchString(v) {
			return "", fmt.Errorf("report: --%s %q: only letters, digits and . _ : - are allowed", name, v)
		}
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
		"$__interval", fmt.Sprintf("%ds", int(interval.Seconds())),
		"$host", re(f.Host),
		"$server", re(f.Server),
		"$gpu", re(f.GPU),
		"$state", state,
	)
	return r.Replace(q.Text), nil
}
