package report

import (
	"encoding/json"
	"strings"

	"github.com/tpsmon/tpsmon/schema"
)

// Dashboard returns the Grafana dashboard (packaging/grafana/tpsmon.json):
// its panels run exactly the report's queries, through an InfluxDB data
// source in InfluxQL mode (1.8+, and 2.x/3.x with a DBRP mapping).
func Dashboard() ([]byte, error) {
	ds := map[string]any{"type": "influxdb", "uid": "${datasource}"}
	target := func(q Query, format string) map[string]any {
		return map[string]any{"datasource": ds, "rawQuery": true, "query": q.Text, "resultFormat": format, "refId": "A"}
	}
	id := 0
	panel := func(title, typ string, x, y, w, h int, q Query, format string, extra map[string]any) map[string]any {
		id++
		p := map[string]any{
			"id": id, "title": title, "type": typ, "datasource": ds,
			"gridPos": map[string]int{"x": x, "y": y, "w": w, "h": h},
			"targets": []any{target(q, format)},
		}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	variable := func(name, label, query string) map[string]any {
		return map[string]any{"name": name, "label": label, "type": "query", "datasource": ds, "query": query,
			"refresh": 2, "includeAll": true, "multi": false, "allValue": ".*", "current": map[string]any{"text": "All", "value": "$__all"}}
	}
	states := []map[string]any{}
	for _, s := range States {
		states = append(states, map[string]any{"text": s, "value": s, "selected": s == schema.StateQueueBound})
	}
	d := map[string]any{
		"title": "tpsmon: is this hardware turning into tokens?", "uid": "tpsmon-fleet", "schemaVersion": 39,
		"tags": []string{"tpsmon", "gpu", "llm"}, "time": map[string]string{"from": "now-24h", "to": "now"},
		"refresh": "1m",
		"templating": map[string]any{"list": []any{
			map[string]any{"name": "datasource", "type": "datasource", "query": "influxdb", "label": "InfluxDB"},
			variable("host", "host", `SHOW TAG VALUES FROM "tpsmon_server" WITH KEY = "host"`),
			variable("server", "server", `SHOW TAG VALUES FROM "tpsmon_server" WITH KEY = "server" WHERE "host" =~ /^$host$/`),
			variable("gpu", "GPU", `SHOW TAG VALUES FROM "tpsmon_gpu" WITH KEY = "gpu" WHERE "host" =~ /^$host$/`),
			map[string]any{"name": "state", "label": "state", "type": "custom", "query": strings.Join(States, ","), "options": states,
				"current": map[string]any{"text": schema.StateQueueBound, "value": schema.StateQueueBound}},
		}},
		"panels": []any{
			panel("System TPS, per-user TPS and concurrency, per server", "timeseries", 0, 0, 24, 9, ServerSeries, "time_series",
				map[string]any{"description": "system_tps: all requests of a server; per_user_tps: the speed one stream sees; running/waiting: the concurrency that explains both."}),
			panel("State over time", "state-timeline", 0, 9, 24, 6, StateTimeline, "time_series", nil),
			panel("Tokens per joule", "bargauge", 0, 15, 8, 8, TokensPerJoule, "table", nil),
			panel("Lowest tokens per GPU-hour", "table", 8, 15, 8, 8, Ranking, "table",
				map[string]any{"transformations": []any{map[string]any{"id": "sortBy", "options": map[string]any{"sort": []any{map[string]any{"field": "tokens_per_gpu_hour"}}}}}}),
			panel("Time in state $state, by server", "table", 16, 15, 8, 8, StateTime, "table", nil),
			panel("GPUs no server uses", "table", 0, 23, 12, 8, UnusedGPUs, "table", nil),
			panel("GPU utilization windows (idle: util < 5%)", "table", 12, 23, 12, 8, GPUIdle, "table", nil),
			panel("GPU time and mean utilization", "table", 0, 31, 24, 8, GPUTime, "table", nil),
		},
	}
	return json.MarshalIndent(d, "", "  ")
}
