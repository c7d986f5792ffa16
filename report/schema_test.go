package report

import (
	"regexp"
	"slices"
	"testing"

	"github.com/tpsmon/tpsmon/schema"
)

// The queries are InfluxQL text, written as Grafana shows them; this ties
// every name they read to the schema the joiner writes.
func TestQueriesReadSchemaNames(t *testing.T) {
	known := map[string]bool{schema.Server: true, schema.GPU: true}
	for _, n := range slices.Concat(schema.ServerTags, schema.ServerFields, schema.GPUTags, schema.GPUFields) {
		known[n] = true
	}
	quoted := regexp.MustCompile(`FROM "([^"]+)"|(?:mean|max|min|sum|count|last)\("([^"]+)"\)|(?:AND|BY|,) "([^"]+)"`)
	alias := regexp.MustCompile(`AS "([^"]+)"`)
	for _, q := range Queries {
		if q.Text == "" {
			continue // reads rollups only: their names are the rollup's (package rollup)
		}
		m := quoted.FindAllStringSubmatch(q.Text, -1)
		if len(m) == 0 {
			t.Fatalf("%s: no names found in %q", q.Name, q.Text)
		}
		// A subquery's columns are the query's own names.
		own := map[string]bool{}
		for _, a := range alias.FindAllStringSubmatch(q.Text, -1) {
			own[a[1]] = true
		}
		for _, g := range m {
			for _, name := range g[1:] {
				if name != "" && !known[name] && !own[name] {
					t.Errorf("%s reads %q, which tpsmon does not write", q.Name, name)
				}
			}
		}
	}
	if !slices.Equal(States, schema.States) {
		t.Errorf("report states %v, schema %v", States, schema.States)
	}
	// Every state but ok is explained in the findings, under its name.
	for _, st := range schema.States {
		if st != schema.StateOK && stateWhy[st] == "" {
			t.Errorf("state %s has no explanation", st)
		}
	}
	for st := range stateWhy {
		if !slices.Contains(schema.States, st) {
			t.Errorf("explanation of %q, which is no state", st)
		}
	}
}
