package rollup

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/schema"
)

// written lists the fields the rollup writes for raw measurement m.
func written(m string) map[string]bool {
	out := map[string]bool{}
	for _, s := range rollups[m] {
		for _, a := range s.aggs {
			out[a.as] = true
		}
		for _, f := range s.perGPU {
			out[f] = true
		}
		if s.inner != "" || s.aggsOnly {
			continue // no time fields of its own
		}
		for _, f := range []string{schema.FieldWindows, schema.FieldSeconds, schema.FieldGPUSeconds} {
			out[s.field(f)] = true
		}
	}
	return out
}

// TestReportReadsRollupNames ties the report's rollup queries to what
// the rollup writes: every name they read is a field of the rolled-up
// measurement or one of its tags, and every aggregate reads a raw field.
func TestReportReadsRollupNames(t *testing.T) {
	tags := map[string]bool{}
	for _, k := range slices.Concat(schema.ServerTags, schema.GPUTags) {
		tags[k] = true
	}
	alias := regexp.MustCompile(`AS "([^"]+)"`)
	from := regexp.MustCompile(`FROM "tpsmon_\$level"\."(tpsmon_[a-z]+)_\$level"`)
	quoted := regexp.MustCompile(`(?:mean|max|min|sum|count|last)\("([^"]+)"\)|(?:AND|BY|,) "([^"]+)"`)
	n := 0
	// The latency's queries are the report's alone (the dashboard draws
	// raw windows).
	for _, q := range append(report.Queries, report.LatencyBuckets, report.AttainmentBuckets) {
		if q.Rollup == "" {
			continue
		}
		ms := from.FindAllStringSubmatch(q.Rollup, -1)
		if len(ms) == 0 {
			t.Fatalf("%s: no rollup measurement in %q", q.Name, q.Rollup)
		}
		fields := written(ms[0][1])
		if len(fields) == 0 {
			t.Errorf("%s reads %s, which is not rolled up", q.Name, ms[0][1])
		}
		// A subquery's columns are the query's own names.
		if strings.Contains(q.Rollup, "(SELECT") {
			for _, a := range alias.FindAllStringSubmatch(q.Rollup, -1) {
				fields[a[1]] = true
			}
		}
		for _, g := range quoted.FindAllStringSubmatch(q.Rollup, -1) {
			for _, name := range g[1:] {
				// $state is every state in turn.
				for _, st := range States {
					n := strings.Replace(name, "$state", st, 1)
					if n != "" && !fields[n] && !tags[n] {
						t.Errorf("%s reads %q, which the rollup of %s does not write", q.Name, n, ms[0][1])
					}
				}
			}
		}
		n++
	}
	if n == 0 {
		t.Fatal("no rollup queries")
	}
	raw := slices.Concat(schema.ServerFields, schema.GPUFields)
	for m, specs := range rollups {
		for _, s := range specs {
			inner := map[string]bool{}
			for _, a := range alias.FindAllStringSubmatch(s.inner, -1) {
				inner[a[1]] = true
			}
			for _, a := range s.aggs {
				if a.expr == "" && !slices.Contains(raw, a.field) && !inner[a.field] {
					t.Errorf("%s rollup aggregates %q, which tpsmon does not write", m, a.field)
				}
			}
		}
	}
}
