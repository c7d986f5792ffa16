package report

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
	"github.com/grafana/grafana-foundation-sdk/go/units"
	"github.com/grafana/grafana-foundation-sdk/go/xychart"
	"github.com/tpsmon/tpsmon/schema"
)

// influxQuery is a raw InfluxQL target of Grafana's InfluxDB data source,
// which the SDK has no builder for.
type influxQuery struct {
	RefID        string                `json:"refId"`
	Datasource   *common.DataSourceRef `json:"datasource,omitempty"`
	Query        string                `json:"query"`
	RawQuery     bool                  `json:"rawQuery"`
	ResultFormat string                `json:"resultFormat"`
}

func (q influxQuery) ImplementsDataqueryVariant() {}
func (q influxQuery) DataqueryType() string       { return "influxdb" }
func (q influxQuery) Validate() error {
	if q.Query == "" {
		return fmt.Errorf("influxdb target %s: empty query", q.RefID)
	}
	return nil
}
func (q influxQuery) Equals(o variants.Dataquery) bool {
	x, ok := o.(influxQuery)
	return ok && x.RefID == q.RefID && x.Query == q.Query && x.ResultFormat == q.ResultFormat
}

type influxQueryBuilder struct{ q influxQuery }

func (b *influxQueryBuilder) Build() (variants.Dataquery, error) { return b.q, b.q.Validate() }

// dsInput names the data source an import asks for (__inputs).
const dsInput = "DS_INFLUXDB"

var ds = common.DataSourceRef{Type: cog.ToPtr("influxdb"), Uid: cog.ToPtr("${" + dsInput + "}")}

// target builds panel target refID from a shared query: its raw text, or
// its rollup text for the fleet-trend row.
func target(refID string, q Query, rollup bool, format string) cog.Builder[variants.Dataquery] {
	text := q.Text
	if rollup {
		text = q.Rollup
	}
	return &influxQueryBuilder{influxQuery{RefID: refID, Datasource: &ds, Query: text, RawQuery: true, ResultFormat: format}}
}

// only keeps time and the fields whose names hold one of cols: a shared
// query may return several quantities, a panel shows one.
func only(cols ...string) dashboard.DataTransformerConfig {
	re := "(time"
	for _, c := range cols {
		re += "|.*" + c + ".*"
	}
	re += ")"
	return dashboard.DataTransformerConfig{Id: "filterFieldsByName", Options: map[string]any{"include": map[string]any{"pattern": re}}}
}

func gridPos(x, y, w, h uint32) dashboard.GridPos { return dashboard.GridPos{X: x, Y: y, W: w, H: h} }

// tokensPerSecond and the like: Grafana has no token unit, so custom
// suffix units name them.
const (
	unitTokS   = "suffix: tok/s"
	unitTokGPU = "suffix: tok/GPU-h"
	unitTokJ   = "suffix: tok/J"
	unitReqs   = "suffix: req"
	unitReqS   = "suffix: req/s"
	unitMHz    = "suffix: MHz"
)

// linePoints is how many points a time series panel asks for per line
// (Grafana's maxDataPoints; else the panel's width in pixels): a line per
// server, 200 of them, shows no more, and every point sent is InfluxDB's
// time (bench/RESULTS.md, dashboard panels at fleet scale). gpuPoints is
// the same for a line per GPU, 1,600 of them: 2 minutes at the
// default hour.
const (
	linePoints = 100
	gpuPoints  = 30
)

// trendRange is the trend row's own range: its rollups serve weeks fast,
// and the raw panels' default hour would leave it one point.
const trendRange = "7d"

func series(title, desc, unit, label string, pos dashboard.GridPos, targets ...cog.Builder[variants.Dataquery]) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title(title).Description(desc).Datasource(ds).Unit(unit).AxisLabel(label).
		GridPos(pos).Targets(targets).Min(0).LineWidth(1).FillOpacity(10).MaxDataPoints(linePoints).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementBottom).ShowLegend(true).Calcs([]string{"mean", "max"}))
}

func sortedTable(title, desc, unit string, pos dashboard.GridPos, sortField string, desc2 bool, t cog.Builder[variants.Dataquery]) *table.PanelBuilder {
	return table.NewPanelBuilder().Title(title).Description(desc).Datasource(ds).Unit(unit).GridPos(pos).
		Targets([]cog.Builder[variants.Dataquery]{t}).
		SortBy([]cog.Builder[common.TableSortByFieldState]{common.NewTableSortByFieldStateBuilder().DisplayName(sortField).Desc(desc2)}).
		// Each series is one frame; merged, the table has a row per series.
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}})
}

// Dashboard returns the Grafana dashboard (packaging/grafana/tpsmon.json),
// built with Grafana's Go builders: every panel runs one of Queries, word
// for word, through an InfluxDB data source in InfluxQL mode (1.8+, and
// 2.x/3.x with DBRP mappings). It is one builder chain, long on purpose:
// panels read in the grid order they are placed in, each gridPos beside
// its neighbours, which split into functions would be apart.
func Dashboard() ([]byte, error) {
	variable := func(name, label, query string) *dashboard.QueryVariableBuilder {
		return dashboard.NewQueryVariableBuilder(name).Label(label).Datasource(ds).
			Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			IncludeAll(true).AllValue(".*").Sort(dashboard.VariableSortAlphabeticalAsc)
	}
	var stateOpts []dashboard.VariableOption
	for _, s := range States {
		stateOpts = append(stateOpts, dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(s)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(s)}, Selected: cog.ToPtr(s == schema.StateQueueBound)})
	}
	cur := func(v string) dashboard.VariableOption {
		return dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(v)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(v)}}
	}
	levelOpts := []dashboard.VariableOption{cur(Hourly), cur(Daily)}
	levelOpts[0].Selected = cog.ToPtr(true)

	stateMap := dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: map[string]dashboard.ValueMappingResult{}}
	for st, color := range stateColor {
		stateMap.Options[st] = dashboard.ValueMappingResult{Color: cog.ToPtr(color), Text: cog.ToPtr(st)}
	}

	raw := func(q Query, format string) cog.Builder[variants.Dataquery] { return target("A", q, false, format) }
	roll := func(ref string, q Query, format string) cog.Builder[variants.Dataquery] {
		return target(ref, q, true, format)
	}
	ts := func(q Query) []cog.Builder[variants.Dataquery] {
		return []cog.Builder[variants.Dataquery]{raw(q, "time_series")}
	}

	// The classic (v1) dashboard JSON is what Grafana's import and every
	// Grafana version in use read; dashboardv2 needs Grafana 12's new schema.
	//lint:ignore SA1019 v1 on purpose, see above
	b := dashboard.NewDashboardBuilder("tpsmon: is this hardware turning into tokens?").
		Uid("tpsmon-fleet").Tags([]string{"tpsmon", "gpu", "llm"}).Time("now-1h", "now").Refresh("1m").Timezone("utc").
		Description("tpsmon's windows in InfluxDB: servers' tokens per second against their GPUs, per GPU readings, and the fleet's trends from the hourly and daily rollups (tpsmon rollup).").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(variable("host", "host", tagValues(schema.Server, schema.TagHost, ""))).
		WithVariable(variable("server", "server", tagValues(schema.Server, schema.TagServer, onHost))).
		WithVariable(variable("gpu", "GPU", tagValues(schema.GPU, schema.TagGPU, onHost))).
		WithVariable(dashboard.NewCustomVariableBuilder("state").Label("state").Values(dashboard.StringOrMap{String: cog.ToPtr(strings.Join(States, ","))}).
			Options(stateOpts).Current(cur(schema.StateQueueBound))).
		WithVariable(dashboard.NewTextBoxVariableBuilder("per_user_floor").Label("per-user floor (tok/s)").
			Description("The per-user objective the operating curve panel draws as a line (tpsmon report --per-user-floor).").
			DefaultValue(dashboard.StringOrMap{String: cog.ToPtr(floorText)}).Current(cur(floorText))).
		WithVariable(dashboard.NewCustomVariableBuilder("level").Label("trend rollup").Description("1h: hourly rollups (weeks); 1d: daily (months, years)").
			Values(dashboard.StringOrMap{String: cog.ToPtr(Hourly + "," + Daily)}).Options(levelOpts).Current(cur(Hourly))).
		WithRow(dashboard.NewRowBuilder("Servers: tokens against hardware (raw windows)")).
		WithPanel(series("System tokens per second", "Tokens per second of all requests of each server, per window; mean over the interval.", unitTokS, "tokens/s", gridPos(0, 1, 12, 8), ts(ServerTPS)...)).
		WithPanel(series("Per-user tokens per second", "The speed one stream sees: decode tokens per second per running request.", unitTokS, "tokens/s per stream", gridPos(12, 1, 12, 8), ts(ServerPerUserTPS)...)).
		WithPanel(series("Running and waiting requests", "Concurrency that explains both rates: requests being decoded, and requests queued.", unitReqs, "requests", gridPos(0, 9, 12, 8), ts(ServerRequests)...)).
		WithPanel(series("GPU utilization and SM activity of each server's GPUs", "Mean over the server's GPUs, 0–100 %. SM activity (where NVML has GPM) says how much of the GPU works; utilization only that a kernel ran.", units.Percent, "%", gridPos(12, 9, 12, 8), ts(ServerGPUs)...).Max(100)).
		WithPanel(statetimeline.NewPanelBuilder().Title("State over time").Description("Each server's verdict per interval (the last window's): down, idle, kv_bound, queue_bound, underutilized, saturated, ok (design §5).").
			Datasource(ds).GridPos(gridPos(0, 17, 24, 7)).Targets(ts(StateTimeline)).Unit("string").MaxDataPoints(linePoints).
			Mappings([]dashboard.ValueMapping{{ValueMap: &stateMap}})).
		WithPanel(sortedTable("Tokens per joule, lowest first", "Tokens generated per joule of the server's GPUs over the range.", unitTokJ, gridPos(0, 24, 8, 8), schema.FieldTokensPerJoule, false, raw(TokensPerJoule, "table"))).
		WithPanel(sortedTable("Tokens per GPU-hour, lowest first", "Mean tokens per second per GPU × 3600, and tokens generated, per server.", unitTokGPU, gridPos(8, 24, 8, 8), colTokensPerGPUHour, false, raw(Ranking, "table"))).
		WithPanel(sortedTable("Time in state $state, most first", "Windows and seconds each server spent in the state picked above; GPUs: the server's gpus tag.", units.Seconds, gridPos(16, 24, 8, 8), colSeconds, true, raw(StateTime, "table"))).
		WithRow(dashboard.NewRowBuilder("GPUs (raw windows; pick host and GPU above)")).
		WithPanel(series("GPU utilization", "Per GPU, 0–100 %: share of time a kernel ran.", units.Percent, "%", gridPos(0, 33, 8, 8), ts(GPUUtil)...).MaxDataPoints(gpuPoints).Max(100)).
		WithPanel(series("SM activity", "Per GPU, 0–100 %: share of SMs busy (NVML GPM; absent on GPUs without it).", units.Percent, "%", gridPos(8, 33, 8, 8), ts(GPUSMActive)...).MaxDataPoints(gpuPoints).Max(100)).
		WithPanel(series("Memory used", "Per GPU: the window's highest framebuffer memory in use.", units.BytesIEC, "memory", gridPos(16, 33, 8, 8), ts(GPUMemUsed)...).MaxDataPoints(gpuPoints)).
		WithPanel(series("Power", "Per GPU: mean power draw over the interval.", units.Watt, "power", gridPos(0, 41, 8, 8), ts(GPUPower)...).MaxDataPoints(gpuPoints)).
		WithPanel(series("Temperature", "Per GPU: the window's highest core temperature.", units.Celsius, "temperature", gridPos(8, 41, 8, 8), ts(GPUTemp)...).MaxDataPoints(gpuPoints)).
		WithPanel(series("SM clock", "Per GPU: mean SM clock; a drop under load with throttling below means power or thermal capping.", unitMHz, "clock", gridPos(16, 41, 8, 8), ts(GPUSMClock)...).MaxDataPoints(gpuPoints)).
		WithPanel(series("Throttled windows", "Per GPU: windows in which NVML reported any clock-throttle reason (power cap, thermal, …).", units.Short, "windows", gridPos(0, 49, 12, 8), ts(GPUThrottle)...).MaxDataPoints(gpuPoints).DrawStyle(common.GraphDrawStyleBars)).
		WithPanel(sortedTable("GPUs no server uses, longest first", "GPUs whose windows carry no server: their time is the report's unused GPU-hours.", units.Seconds, gridPos(12, 49, 12, 8), colSeconds, true, raw(UnusedGPUs, "table"))).
		WithPanel(sortedTable("Idle windows per GPU (util < 5 %), most first", "Windows each GPU spent under 5 % utilization, with the server it serves.", units.Short, gridPos(0, 57, 12, 8), colIdleWindows, true, raw(GPUIdle, "table"))).
		WithPanel(sortedTable("GPU time, energy and mean utilization", "Per GPU and serving server: windows, seconds observed (from window_s), mean utilization, energy.", units.Seconds, gridPos(12, 57, 12, 8), colSeconds, true, raw(GPUTable, "table"))).
		WithRow(dashboard.NewRowBuilder("Fleet (raw windows)")).
		WithPanel(series("Tokens generated per interval", "All servers' tokens, summed per interval.", units.Short, "tokens", gridPos(0, 66, 12, 8), ts(FleetTokens)...).DrawStyle(common.GraphDrawStyleBars)).
		WithPanel(series("GPU energy per host", "Energy of all of a host's GPUs per interval, used or not.", units.Joule, "energy", gridPos(12, 66, 12, 8), ts(FleetEnergy)...)).
		WithPanel(series("Time in state $state per host", "Seconds per interval each host's servers spent in the state picked above (window_s; older points count as windows).", units.Seconds, "seconds", gridPos(0, 74, 12, 8), ts(StateTrend)...).
			DrawStyle(common.GraphDrawStyleBars).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).WithTransformation(only(colSeconds))).
		WithPanel(series("Unused GPU time per host", "Seconds per interval of GPUs no server uses, per host.", units.Seconds, "seconds", gridPos(12, 74, 12, 8), ts(UnusedTrend)...).
			DrawStyle(common.GraphDrawStyleBars).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).WithTransformation(only(colSeconds))).
		WithRow(dashboard.NewRowBuilder("Fleet trends (rollups: $level)")).
		WithPanel(series("Fleet tokens per second", "Sum over servers of each one's mean tokens per second in the interval; from the $level rollups.", unitTokS, "tokens/s", gridPos(0, 83, 12, 8), roll("A", FleetTPS, "time_series")).Interval("1h").TimeFrom(trendRange)).
		WithPanel(series("Tokens per GPU-hour of the GPUs serving", "Tokens over the GPU-hours of the servers' GPUs (unused GPUs are in the next panel); $level rollups.", unitTokGPU, "tokens/GPU-h", gridPos(12, 83, 12, 8), roll("A", FleetEfficiency, "time_series")).
			Interval("1h").TimeFrom(trendRange).WithTransformation(only(colTokensPerGPUHour))).
		WithPanel(series("Tokens per joule", "Tokens over the servers' GPUs' energy; $level rollups.", unitTokJ, "tokens/J", gridPos(0, 91, 12, 8), roll("A", FleetEfficiency, "time_series")).
			Interval("1h").TimeFrom(trendRange).WithTransformation(only(schema.FieldTokensPerJoule))).
		WithPanel(series("GPU-hours per state", "GPU-hours per interval: a server's GPUs in its state, and GPUs no server uses (unused); stacked, they are all GPUs × hours. $level rollups.", units.Hours, "GPU-hours", gridPos(12, 91, 12, 8),
			roll("A", StateHoursTrend, "time_series"), roll("B", UnusedHours, "time_series")).
			Interval("1h").TimeFrom(trendRange).DrawStyle(common.GraphDrawStyleBars).FillOpacity(80).Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))).
		WithPanel(sortedTable("Worst servers: tokens per GPU-hour, lowest first ($level rollups)", "Per server over the range, from the rollups.", unitTokGPU, gridPos(0, 99, 12, 8), colTokensPerGPUHour, false, roll("A", Ranking, "table")).TimeFrom(trendRange)).
		WithPanel(sortedTable("Worst GPUs: idle windows, most first ($level rollups)", "Windows under 5 % utilization per GPU over the range, from the rollups.", units.Short, gridPos(12, 99, 12, 8), colIdleWindows, true, roll("A", GPUIdle, "table")).TimeFrom(trendRange)).
		WithRow(dashboard.NewRowBuilder("Operating curve (raw windows)")).
		WithPanel(curvePanel(raw(CurveWindows, "table"), target("B", CurveFloor, false, "table"))).
		WithRow(dashboard.NewRowBuilder("What one user feels (raw windows; servers whose engine gives latencies)")).
		WithPanel(series("Time to first token, p50 / p90 / p99", "Per server, the worst window of the interval. From histograms a quantile is interpolated in its bucket (ttft_p90_lo_s / _hi_s are the bucket's edges); from request lines (llama.cpp, TGI, Ollama) exact, and the server's own time, counted from where the window's ttft_basis says: http (the server's HTTP handler: the user's wait but the network), slot (the llama.cpp loop's taking the request: its HTTP handling and queue before that left out) or prefill (the prompt's evaluation only). The report (ttft_narrowed_bases) and tpsmon top name the servers whose TTFT counts from later than the arrival.", units.Seconds, "seconds", gridPos(0, 119, 12, 8), ts(TTFTSeries)...)).
		WithPanel(series("Inter-token latency, p50 / p90 / p99", "Per server, the worst window of the interval: per token gap from histograms, each request's mean gap from request lines.", units.Seconds, "seconds", gridPos(12, 119, 12, 8), ts(ITLSeries)...)).
		WithPanel(series("SLO attainment", "Share of the window's requests that met every objective (slo: in the configuration); from histograms only its bounds are known (lo and hi), the lowest window of the interval.", units.PercentUnit, "share of requests", gridPos(0, 127, 12, 8), ts(SLOSeries)...).Min(0).Max(1)).
		WithPanel(series("Goodput", "Requests per second that met the objectives (lower bound), mean over the interval.", unitReqS, "requests/s", gridPos(12, 127, 12, 8), ts(GoodputSeries)...)).
		WithRow(dashboard.NewRowBuilder("Decode ceiling (servers with model facts and a GPU peak)")).
		WithPanel(series("Model bandwidth utilization (MBU)", "Per server: the bytes its decode steps read per second over its GPUs' peak memory bandwidth, mean over the interval. Above 100 % a fact is wrong (speculative decoding, MoE counted with all experts, bytes per weight); low with many requests running: host- or scheduler-bound.", units.PercentUnit, "share of peak bandwidth", gridPos(0, 136, 12, 8), ts(MBUSeries)...)).
		WithPanel(series("Decode ceiling against observed tokens per second", "Per server: the system tokens/s its GPUs could give at the window's running requests and KV occupancy (ceiling_tps), and what it gave (system_tps), over the windows with a ceiling.", unitTokS, "tokens/s", gridPos(12, 136, 12, 8), ts(CeilingSeries)...)).
		WithPanel(sortedTable("Throughput lost below the ceiling, most first", "Per server and GPU set over the range: lost_tokens = Σ max(0, ceiling − observed) × window; lost_seconds the share of time the same tokens would not have needed at the ceiling (× the GPUs: GPU-seconds); windows and ceiling_windows say how many windows had a ceiling (the report adds the tokens above it and the time-weighted MBU).", units.Short, gridPos(0, 144, 12, 8), schema.FieldLostTokens, true, raw(LostTable, "table"))).
		WithPanel(sortedTable("Throughput lost below the ceiling, most first ($level rollups)", "The same, from the rollups.", units.Short, gridPos(12, 144, 12, 8), schema.FieldLostTokens, true, roll("A", LostTable, "table")))
	d, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	body, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	// Import conventions the SDK leaves to us: the data source is asked
	// for on import (__inputs), and what the dashboard needs is listed
	// (__requires).
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	m["__inputs"] = []map[string]string{{"name": dsInput, "label": "InfluxDB (InfluxQL)", "description": "InfluxDB 1.8+, or 2.x/3.x with DBRP mappings",
		"type": "datasource", "pluginId": "influxdb", "pluginName": "InfluxDB"}}
	m["__requires"] = []map[string]string{
		{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
		{"type": "datasource", "id": "influxdb", "name": "InfluxDB", "version": "1.0.0"},
		{"type": "panel", "id": "timeseries", "name": "Time series", "version": ""},
		{"type": "panel", "id": "state-timeline", "name": "State timeline", "version": ""},
		{"type": "panel", "id": "table", "name": "Table", "version": ""},
		{"type": "panel", "id": "xychart", "name": "XY Chart", "version": ""},
	}
	return json.MarshalIndent(m, "", "  ")
}

// onHost limits a variable's values to the hosts picked.
var onHost = fmt.Sprintf(` WHERE %q =~ /^$host$/`, schema.TagHost)

// tagValues is the query of a variable: the values of tag key in
// measurement m, then where.
func tagValues(m, key, where string) string {
	return fmt.Sprintf(`SHOW TAG VALUES FROM %q WITH KEY = %q`, m, key) + where
}

// floorText is the per-user floor variable's default: the report's.
var floorText = strconv.FormatFloat(DefaultPerUserFloor, 'g', -1, 64)

// curvePanel is the operating curve as Grafana draws it: a point per raw
// window, per-user TPS across, system TPS up, coloured by running
// requests (the report bins and judges them; Grafana shows the cloud),
// and the per-user floor ($per_user_floor) as a vertical line: the floor
// target's points, one per interval at x = floor, joined.
func curvePanel(t, floor cog.Builder[variants.Dataquery]) *xychart.PanelBuilder {
	field := func(name string) *xychart.MatcherConfigBuilder {
		return xychart.NewMatcherConfigBuilder().Id("byName").Options(name)
	}
	red := "#d6452f"
	return xychart.NewPanelBuilder().Title("Operating curve: system against per-user tokens per second").
		Description("One point per window: per-user tokens/s across, the server's system tokens/s up, coloured by mean running requests. Up and to the right is better; more concurrency moves a server up and left until per-user speed falls under its objective (tpsmon report draws the floor and the operating point).").
		Datasource(ds).Unit(unitTokS).GridPos(gridPos(0, 108, 24, 10)).Targets([]cog.Builder[variants.Dataquery]{t, floor}).
		Show(xychart.XYShowModePoints).Mapping(xychart.SeriesMappingManual).AxisLabel("tokens/s").
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdContinuousBlues)).
		Series([]cog.Builder[xychart.XYSeriesConfig]{xychart.NewXYSeriesConfigBuilder().
			X(xychart.NewXychartXYSeriesConfigXBuilder().Matcher(field(schema.FieldPerUserTPS))).
			Y(xychart.NewXychartXYSeriesConfigYBuilder().Matcher(field(schema.FieldSystemTPS))).
			Color(xychart.NewXychartXYSeriesConfigColorBuilder().Matcher(field(schema.FieldRunning))),
			xychart.NewXYSeriesConfigBuilder().Name(xychart.NewXychartXYSeriesConfigNameBuilder().Fixed("per-user floor")).
				X(xychart.NewXychartXYSeriesConfigXBuilder().Matcher(field(colFloor))).
				Y(xychart.NewXychartXYSeriesConfigYBuilder().Matcher(field(colFloorSystemTPS)))}).
		OverrideByName(colFloorSystemTPS, []dashboard.DynamicConfigValue{
			{Id: "custom.show", Value: string(xychart.XYShowModeLines)},
			{Id: "custom.lineWidth", Value: 2},
			{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{8, 4}}},
			{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": red}},
		})
}
