package report

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/schema"
)

// lost reads each server's throughput below its decode ceiling, one
// query for the range (a row per server and GPU set), and ranks them.
func (b *builder) lost() error {
	by := map[string]*Lost{}
	var order []string
	err := b.totalRows(LostThroughput, "", func(tags map[string]string, row map[string]any) error {
		k := tags[schema.TagHost] + "\x00" + tags[schema.TagServer]
		l, ok := by[k]
		if !ok {
			l = &Lost{Host: tags[schema.TagHost], Server: tags[schema.TagServer]}
			by[k] = l
			order = append(order, k)
		}
		if tags[schema.TagGPUs] != "" {
			l.GPUs = tags[schema.TagGPUs]
		}
		num := func(col string) float64 { v, _ := influxql.Num(row[col]); return v }
		l.Windows += int(num(schema.FieldWindows))
		n := int(num(schema.FieldCeilingWindows))
		if n == 0 {
			return nil
		}
		l.CeilingWindows += n
		add := func(dst **float64, v float64) {
			if *dst == nil {
				*dst = new(float64)
			}
			**dst += v
		}
		add(&l.LostTokens, num(schema.FieldLostTokens))
		add(&l.LostGPUHours, num(schema.FieldLostSeconds)*float64(gpuCount(tags[schema.TagGPUs]))/3600)
		l.CeilingTokens += num(ColCeilingTokens)
		l.AboveCeilingTokens += num(schema.FieldAboveCeilingTokens)
		l.CeilingHours += num(schema.FieldCeilingSeconds) / 3600
		if m, ok := influxql.Num(row[schema.FieldMBU]); ok {
			w := num(schema.FieldMBUSeconds)
			l.mbuSum += m * w
			l.mbuSecs += w
		}
		return nil
	})
	if err != nil {
		return err
	}
	r := b.r
	for _, k := range order {
		l := by[k]
		l.WindowsWithoutCeiling = l.Windows - l.CeilingWindows
		r.WindowsWithoutCeiling += l.WindowsWithoutCeiling
		if l.mbuSecs > 0 {
			v := l.mbuSum / l.mbuSecs
			l.MBU = &v
		}
		if l.LostTokens != nil {
			if l.CeilingTokens > 0 {
				v := *l.LostTokens / l.CeilingTokens
				l.LostShare = &v
			}
			if r.LostTokens == nil {
				r.LostTokens, r.LostGPUHours = new(float64), new(float64)
			}
			*r.LostTokens += *l.LostTokens
			*r.LostGPUHours += *l.LostGPUHours
		}
		r.Lost = append(r.Lost, *l)
	}
	sortLost(r.Lost)
	return nil
}

// sortLost ranks servers by lost GPU-hours, then lost tokens, then name;
// servers without a ceiling last.
func sortLost(ls []Lost) {
	sort.SliceStable(ls, func(i, j int) bool {
		x, y := ls[i], ls[j]
		if (x.LostGPUHours == nil) != (y.LostGPUHours == nil) {
			return x.LostGPUHours != nil
		}
		if x.LostGPUHours != nil && rankKey(*x.LostGPUHours) != rankKey(*y.LostGPUHours) {
			return *x.LostGPUHours > *y.LostGPUHours
		}
		if x.LostTokens != nil && rankKey(*x.LostTokens) != rankKey(*y.LostTokens) {
			return *x.LostTokens > *y.LostTokens
		}
		return x.Host+"/"+x.Server < y.Host+"/"+y.Server
	})
}

// lostFindings names the servers that lost the most below their ceiling,
// and how many windows had no ceiling to judge by.
func lostFindings(r *Report) []string {
	var out []string
	n := 0
	for _, l := range r.Lost {
		if l.LostGPUHours == nil || *l.LostGPUHours <= 0 {
			continue
		}
		if n == maxPerKind {
			out = append(out, fmt.Sprintf("%d more servers lost throughput below their decode ceiling", len(r.Lost)-n))
			break
		}
		n++
		share := ""
		if l.LostShare != nil {
			share = fmt.Sprintf(", %d%% of what it allowed", pct(*l.LostShare))
		}
		mbu := ""
		if l.MBU != nil {
			mbu = fmt.Sprintf(" at a mean MBU of %d%%", pct(*l.MBU))
		}
		out = append(out, fmt.Sprintf("server %s on %s decoded %.1f GPU-hours' worth below its decode ceiling%s: %s tokens lost%s, over %d windows with a ceiling",
			l.Server, l.Host, *l.LostGPUHours, mbu, short(*l.LostTokens), share, l.CeilingWindows))
	}
	var without []string
	for _, l := range r.Lost {
		if l.WindowsWithoutCeiling > 0 {
			without = append(without, fmt.Sprintf("%s on %s %d of %d", l.Server, l.Host, l.WindowsWithoutCeiling, l.Windows))
		}
	}
	if len(without) > 0 {
		if len(without) > maxPerKind {
			without = append(without[:maxPerKind], fmt.Sprintf("%d more servers", len(without)-maxPerKind))
		}
		out = append(out, fmt.Sprintf("%d server windows had no decode ceiling, so no lost throughput (a model fact or GPU peak is missing there, or nothing decoded; tpsmon check names the fact): %s",
			r.WindowsWithoutCeiling, strings.Join(without, ", ")))
	}
	return out
}
