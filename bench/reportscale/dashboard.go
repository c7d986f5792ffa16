package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sim/fleetsim"
)

// The dashboard mode (-dashboard FILE) runs every target of a Grafana
// dashboard file as Grafana would on opening it: over each panel's
// default range, with $timeFilter, $__interval and the template
// variables filled in, "now" being the end of the loaded data.

// dashPanel is what of a panel decides its queries.
type dashPanel struct {
	Title         string  `json:"title"`
	Type          string  `json:"type"`
	Interval      string  `json:"interval"`
	MaxDataPoints float64 `json:"maxDataPoints"`
	TimeFrom      string  `json:"timeFrom"`
	TimeShift     string  `json:"timeShift"`
	GridPos       struct {
		W int `json:"w"`
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Query string `json:"query"`
	} `json:"targets"`
}

type dashFile struct {
	Time struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			AllValue string `json:"allValue"`
			Current  struct {
				Value any `json:"value"`
			} `json:"current"`
			IncludeAll bool `json:"includeAll"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashPanel `json:"panels"`
}

// screenPx is the width in pixels of the dashboard's 24 grid columns:
// Grafana asks a panel for as many points as it is pixels wide, unless
// the panel sets maxDataPoints.
const screenPx = 1920

// relative parses Grafana's "now-6h" / "now" (and a panel's "6h").
func relative(s string) (time.Duration, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "now"), "-")
	if s == "" {
		return 0, nil
	}
	return grafanaDuration(s)
}

// grafanaDuration reads 10s, 5m, 6h, 7d, 2w, 1y (Grafana's units).
func grafanaDuration(s string) (time.Duration, error) {
	m := regexp.MustCompile(`^(\d+)(ms|s|m|h|d|w|y)$`).FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("duration %q: want a number and one of ms s m h d w y", s)
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour,
		"d": 24 * time.Hour, "w": 7 * 24 * time.Hour, "y": 365 * 24 * time.Hour}[m[2]]
	return time.Duration(n) * unit, nil
}

// niceIntervals are the intervals Grafana rounds $__interval to, each with
// the raw interval under which it is picked (rangeutil's roundInterval).
var niceIntervals = []struct{ below, nice time.Duration }{
	{15 * time.Millisecond, 10 * time.Millisecond}, {35 * time.Millisecond, 20 * time.Millisecond},
	{75 * time.Millisecond, 50 * time.Millisecond}, {150 * time.Millisecond, 100 * time.Millisecond},
	{350 * time.Millisecond, 200 * time.Millisecond}, {750 * time.Millisecond, 500 * time.Millisecond},
	{1500 * time.Millisecond, time.Second}, {3500 * time.Millisecond, 2 * time.Second},
	{7500 * time.Millisecond, 5 * time.Second}, {12500 * time.Millisecond, 10 * time.Second},
	{17500 * time.Millisecond, 15 * time.Second}, {25 * time.Second, 20 * time.Second},
	{45 * time.Second, 30 * time.Second}, {90 * time.Second, time.Minute},
	{210 * time.Second, 2 * time.Minute}, {450 * time.Second, 5 * time.Minute},
	{750 * time.Second, 10 * time.Minute}, {1050 * time.Second, 15 * time.Minute},
	{1500 * time.Second, 20 * time.Minute}, {2700 * time.Second, 30 * time.Minute},
	{5400 * time.Second, time.Hour}, {9000 * time.Second, 2 * time.Hour},
	{16200 * time.Second, 3 * time.Hour}, {32400 * time.Second, 6 * time.Hour},
	{24 * time.Hour, 12 * time.Hour}, {7 * 24 * time.Hour, 24 * time.Hour},
	{21 * 24 * time.Hour, 7 * 24 * time.Hour}, {42 * 24 * time.Hour, 30 * 24 * time.Hour},
}

// grafanaInterval is $__interval for a range drawn in points points, at
// least min: the range over the points, rounded to a nice interval.
func grafanaInterval(span time.Duration, points float64, min time.Duration) time.Duration {
	raw := time.Duration(float64(span) / points)
	iv := 365 * 24 * time.Hour
	for _, n := range niceIntervals {
		if raw < n.below {
			iv = n.nice
			break
		}
	}
	return max(iv, min)
}

// influxDuration writes d as InfluxQL's duration literal (Grafana's
// secondsToHms picks the largest whole unit the same way).
func influxDuration(d time.Duration) string {
	for _, u := range []struct {
		d time.Duration
		s string
	}{{7 * 24 * time.Hour, "w"}, {24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d >= u.d && d%u.d == 0 {
			return fmt.Sprintf("%d%s", d/u.d, u.s)
		}
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// unfilled finds a Grafana variable in a query (a regex's $ anchor is not one).
var unfilled = regexp.MustCompile(`\$\{?[A-Za-z_]\w*`)

// dashRow is one measured target.
type dashRow struct {
	Panel, Range, Interval, Query string
	Target                        int // its place among the panel's targets
	Median, Min, Max              time.Duration
	Series, Rows, Runs            int
}

// slowRun is a first run so slow that the harness does not repeat it;
// at queryCap it stops waiting (InfluxDB drops a query whose client left).
const (
	slowRun  = 3 * time.Second
	queryCap = 15 * time.Second
)

// maxAnswer is the most of an answer report.Client reads.
const maxAnswer = 256 << 20

// timeDashboard runs every target of the dashboard file path three times
// against c, now being end, and returns a row per target.
// jsonAnswers asks InfluxDB for JSON, as Grafana's InfluxQL data source
// does: the report's client asks for MessagePack, which costs InfluxDB
// less.
type jsonAnswers struct{}

func (jsonAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Accept", "application/json")
	return http.DefaultTransport.RoundTrip(r)
}

func timeDashboard(ctx context.Context, client *report.Client, path string, end time.Time) ([]dashRow, error) {
	c := *client
	c.HTTP = &http.Client{Transport: jsonAnswers{}}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashFile
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	from, err := relative(d.Time.From)
	if err != nil {
		return nil, fmt.Errorf("dashboard time.from: %w", err)
	}
	to, err := relative(d.Time.To)
	if err != nil {
		return nil, fmt.Errorf("dashboard time.to: %w", err)
	}
	// Template variables at their defaults: All is the variable's
	// allValue (Grafana writes it into the regex as it is).
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		val := fmt.Sprint(v.Current.Value)
		if s, ok := v.Current.Value.([]any); ok && len(s) == 1 {
			val = fmt.Sprint(s[0])
		}
		if v.Current.Value == nil || val == "$__all" || val == "" && v.IncludeAll {
			if !v.IncludeAll {
				return nil, fmt.Errorf("variable %s has no default and no All", v.Name)
			}
			val = v.AllValue
		}
		vars[v.Name] = val
	}
	names := map[string]string{}
	for _, q := range report.Queries {
		if q.Text != "" {
			names[q.Text] = q.Name
		}
		if q.Rollup != "" {
			names[q.Rollup] = q.Name + " (rollup)"
		}
	}
	var rows []dashRow
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		pFrom, pTo := from, to
		if p.TimeFrom != "" {
			if pFrom, err = relative(p.TimeFrom); err != nil {
				return nil, fmt.Errorf("panel %q timeFrom: %w", p.Title, err)
			}
			pTo = 0
		}
		if p.TimeShift != "" {
			shift, err := relative(p.TimeShift)
			if err != nil {
				return nil, fmt.Errorf("panel %q timeShift: %w", p.Title, err)
			}
			pFrom, pTo = pFrom+shift, pTo+shift
		}
		t0, t1 := end.Add(-pFrom), end.Add(-pTo)
		points := p.MaxDataPoints
		if points <= 0 {
			points = float64(p.GridPos.W * screenPx / 24)
		}
		var minIv time.Duration
		if p.Interval != "" {
			if minIv, err = grafanaDuration(p.Interval); err != nil {
				return nil, fmt.Errorf("panel %q interval: %w", p.Title, err)
			}
		}
		iv := grafanaInterval(t1.Sub(t0), points, minIv)
		subst := [][2]string{{"$timeFilter", fmt.Sprintf("time >= %dms and time <= %dms", t0.UnixMilli(), t1.UnixMilli())},
			{"$__interval", influxDuration(iv)}}
		for k, v := range vars {
			subst = append(subst, [2]string{"$" + k, v})
		}
		// Longer names first, so that no name is taken for a prefix of
		// another (the replacer tries them in order).
		slices.SortFunc(subst, func(a, b [2]string) int { return len(b[0]) - len(a[0]) })
		var flat []string
		for _, s := range subst {
			flat = append(flat, s[0], s[1])
		}
		r := strings.NewReplacer(flat...)
		for ti, tg := range p.Targets {
			q := r.Replace(tg.Query)
			if v := unfilled.FindString(q); v != "" {
				return nil, fmt.Errorf("panel %q: variable %s is left unfilled", p.Title, v)
			}
			name := names[tg.Query]
			if name == "" {
				name = "(not one of report.Queries)"
			}
			row := dashRow{Panel: p.Title, Target: ti, Range: influxDuration(pFrom - pTo), Interval: influxDuration(iv), Query: name}
			if p.TimeShift != "" {
				row.Range += " shifted " + p.TimeShift
			}
			var times []time.Duration
			for len(times) < 3 {
				var tr report.Trace
				qctx, cancel := context.WithTimeout(report.WithTrace(ctx, &tr), queryCap)
				s, err := c.Query(qctx, q)
				late := qctx.Err() != nil // the client may report it as a short answer
				cancel()
				if late || errors.Is(err, context.DeadlineExceeded) {
					times, row.Runs = []time.Duration{queryCap}, 0
					break
				}
				if err != nil && len(tr.Queries) == 1 && tr.Queries[0].Bytes >= maxAnswer {
					// Grafana would fare no better with an answer this big.
					times, row.Runs = []time.Duration{tr.Queries[0].Influx}, -1
					break
				}
				if err != nil {
					return nil, fmt.Errorf("panel %q: %w\n%s", p.Title, err, q)
				}
				times = append(times, tr.Queries[0].Influx)
				row.Series, row.Rows = len(s), 0
				for _, x := range s {
					row.Rows += len(x.Values)
				}
				if tr.Queries[0].Influx > slowRun {
					break // far over any target: once tells enough
				}
			}
			slices.Sort(times)
			row.Min, row.Median, row.Max = times[0], times[len(times)/2], times[len(times)-1]
			if row.Median < queryCap && row.Runs == 0 {
				row.Runs = len(times)
			}
			fmt.Fprintf(os.Stderr, "%-50.50s %6s %5s %-28s %7.0f ms %8d rows\n", row.Panel, row.Range, row.Interval, row.Query, ms(row.Median), row.Rows)
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dashTable is the rows as the markdown table the dashboard section holds
// (report's dashboard test reads its panel and range columns), beside the
// same panel's target of before, if timed.
func dashTable(rows, before []dashRow) string {
	timing := func(r dashRow) string {
		if r.Runs == 0 {
			return fmt.Sprintf("> %.0f (cut)", ms(queryCap))
		}
		if r.Runs < 0 {
			return fmt.Sprintf("> %.0f (answer over 256 MiB, cut)", ms(r.Median))
		}
		if r.Runs == 1 {
			return fmt.Sprintf("%.0f (1 run)", ms(r.Median))
		}
		return fmt.Sprintf("%.0f (%.0f–%.0f)", ms(r.Median), ms(r.Min), ms(r.Max))
	}
	var b strings.Builder
	b.WriteString("| panel | range | interval | query | median ms (min–max) | series | rows |")
	if before != nil {
		b.WriteString(" before: range, interval, query | before: median ms | before: rows |")
	}
	b.WriteString("\n|---|---|---|---|---|---|---|")
	if before != nil {
		b.WriteString("---|---|---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d |", r.Panel, r.Range, r.Interval, r.Query, timing(r), r.Series, r.Rows)
		if before != nil {
			i := slices.IndexFunc(before, func(o dashRow) bool { return o.Panel == r.Panel && o.Target == r.Target })
			if i < 0 {
				b.WriteString(" (new) | | |")
			} else {
				o := before[i]
				fmt.Fprintf(&b, " %s, %s, %s | %s | %d |", o.Range, o.Interval, o.Query, timing(o), o.Rows)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// denseRaw replaces the kept raw windows of the last day before end with
// windows of length w, once (a marker file in dir says it was done): the
// daemon's default is 10 s, a density report-scale's load does not have.
func denseRaw(ctx context.Context, c *report.Client, base, dir string, fleet fleetsim.Fleet, end time.Time, w time.Duration) error {
	marker := filepath.Join(dir, "raw-"+w.String())
	if _, err := os.Stat(marker); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// The rollups are measurements of their own (tpsmon_server_1h, ...).
	for _, m := range []string{schema.Server, schema.GPU} {
		if _, err := c.Query(ctx, fmt.Sprintf("DROP MEASUREMENT %q", m)); err != nil {
			return fmt.Errorf("dropping raw %s: %w", m, err)
		}
	}
	t0 := time.Now()
	n, err := writeAll(base, "tpsmon", func(e func(*write.Point) error) error {
		return fleet.Raw(end.Add(-25*time.Hour), end, w, e)
	})
	if err != nil {
		return fmt.Errorf("raw %v windows: %w", w, err)
	}
	line := fmt.Sprintf("| raw %v windows, 25 hours (replacing the above's) | %d | %.0f s | %.0f |\n", w, n, time.Since(t0).Seconds(), float64(n)/time.Since(t0).Seconds())
	fmt.Fprint(os.Stderr, line)
	return os.WriteFile(marker, []byte(line), 0o644)
}
