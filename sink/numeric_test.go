package sink

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// TestNumericCodesPinned pins every code of the numeric profile: they are
// append-only, so a change here breaks every store that holds them.
func TestNumericCodesPinned(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want map[string]int64
		mustHold  []string
	}{
		{"state_code", schema.StateCodes, map[string]int64{"down": 1, "idle": 2, "kv_bound": 3, "queue_bound": 4,
			"underutilized": 5, "saturated": 6, "ok": 7, "sleeping": 8}, schema.States},
		{"source_code", schema.SourceCodes, map[string]int64{"metrics": 1, "log": 2},
			[]string{schema.SourceMetrics, schema.SourceLog}},
		{"energy_source_code", schema.EnergySourceCodes, map[string]int64{"counter": 1, "power": 2},
			[]string{schema.EnergyCounter, schema.EnergyPower}},
		{"spec_finding_code", schema.SpecFindingCodes, map[string]int64{"": 0, "spec_ineffective": 1},
			[]string{"", analysis.FindingSpecIneffective}},
		{"ceiling_finding_code", schema.CeilingFindingCodes, map[string]int64{"near_ceiling": 1, "demand_bound": 2, "host_bound": 3},
			[]string{analysis.FindingNearCeiling, analysis.FindingDemandBound, analysis.FindingHostBound}},
		{"latency_source_code", schema.LatencySourceCodes, map[string]int64{"requests": 1, "histogram": 2},
			[]string{latency.SourceRequests, latency.SourceHistogram}},
		{"slo_miss_phase_code", schema.SLOMissPhaseCodes, map[string]int64{"queue": 1, "prefill": 2, "decode": 3},
			[]string{"queue", "prefill", "decode"}},
	} {
		if !maps.Equal(c.got, c.want) {
			t.Errorf("%s: %v, pinned %v", c.name, c.got, c.want)
		}
		for _, v := range c.mustHold {
			if _, ok := c.got[v]; !ok {
				t.Errorf("%s: value %q has no code", c.name, v)
			}
		}
	}
	for _, s := range schema.States {
		if s == "code" {
			t.Errorf("a state named code would collide with state_code")
		}
	}
}

// TestNumericCoversStrings: every string field a window with all its
// values present writes has a numeric form, so a string field added to
// the points without one fails here.
func TestNumericCoversStrings(t *testing.T) {
	var sw analysis.ServerWindow
	present(&sw.ServerWindow)
	present(&sw)
	sw.Latency, sw.SLOMiss = fullLatency(), "queue"
	var gw analysis.GPUWindow
	present(&gw.GPUWindow)
	for _, fs := range []fields{serverFields(nil, sw), gpuFields(nil, gw)} {
		for _, f := range fs {
			if _, ok := numericOf[f.key]; f.kind == 's' && !ok {
				t.Errorf("string field %s has no numeric form (numericOf)", f.key)
			}
		}
	}
	// With valid values, the numeric fields' keys are unique: none stands
	// on another field's name.
	sw.State, sw.Source, sw.SpecFinding, sw.Suspect = schema.StateOK, schema.SourceLog, window.Some(""), window.Some(analysis.RuleGPUIdle)
	sw.Finding = window.Some(analysis.FindingNearCeiling)
	gw.EnergySource = window.Some(schema.EnergyPower)
	for _, src := range []fields{serverFields(nil, sw), gpuFields(nil, gw)} {
		num, err := numeric(nil, src)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(num); i++ {
			if num[i].key == num[i-1].key {
				t.Errorf("field %s twice in the numeric profile", num[i].key)
			}
		}
	}
}

// decode reads line protocol into one map of fields per line, keyed by
// measurement and tags.
func decode(t *testing.T, b []byte) (keys []string, points map[string]map[string]any) {
	t.Helper()
	points = map[string]map[string]any{}
	dec := lineprotocol.NewDecoderWithBytes(b)
	for dec.Next() {
		m, err := dec.Measurement()
		if err != nil {
			t.Fatal(err)
		}
		key := string(m)
		for {
			k, v, err := dec.NextTag()
			if err != nil {
				t.Fatal(err)
			}
			if k == nil {
				break
			}
			key += "," + string(k) + "=" + string(v)
		}
		fs := map[string]any{}
		for {
			k, v, err := dec.NextField()
			if err != nil {
				t.Fatal(err)
			}
			if k == nil {
				break
			}
			fs[string(k)] = v.Interface()
		}
		if _, err := dec.Time(lineprotocol.Millisecond, time.Time{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		points[key] = fs
	}
	return keys, points
}

func encodeProfile(t *testing.T, p Profile, cs []analysis.Closed) ([]byte, error) {
	t.Helper()
	var b bytes.Buffer
	w := NewLPWriter(&b)
	w.SetProfile(p)
	err := w.WriteWindows(cs)
	return b.Bytes(), err
}

// TestNumericProfile encodes the same windows in both profiles: the tags,
// times and numbers are the same, and every string field of the default
// is gone and stands as its numeric fields with the values that mean it.
func TestNumericProfile(t *testing.T) {
	sw := analysis.ServerWindow{State: schema.StateSleeping, ServerWindow: window.ServerWindow{
		Start: start, Length: 10 * time.Second, Host: "h", Server: "s", Engine: "vllm", GPUs: []string{"0"},
		Tokens: window.Some[int64](7), SystemTPS: window.Some(0.7), Coverage: 1, Source: schema.SourceLog}}
	sw.SpecFinding = window.Some(analysis.FindingSpecIneffective)
	sw.Suspect = window.Some(analysis.RuleGPUIdle + "," + analysis.RuleAboveCeiling)
	sw.Finding = window.Some(analysis.FindingHostBound)
	sw.Latency, sw.SLOMiss = fullLatency(), "prefill"
	quiet := analysis.ServerWindow{State: schema.StateOK, ServerWindow: window.ServerWindow{
		Start: start, Length: 10 * time.Second, Host: "h", Server: "t", Coverage: 1, Source: schema.SourceMetrics}}
	quiet.SpecFinding = window.Some("")
	gw := analysis.GPUWindow{GPUWindow: window.GPUWindow{Start: start, Length: 10 * time.Second, Host: "h",
		Label: "0", UUID: "GPU-x", PowerW: window.Some(300.0), EnergySource: window.Some(schema.EnergyPower),
		Error: window.Some("gpu 0: lost"), Samples: 3}}
	cs := []analysis.Closed{{Start: start, GPUs: []analysis.GPUWindow{gw}, Servers: []analysis.ServerWindow{sw, quiet}}}

	def, err := encodeProfile(t, ProfileInflux, cs)
	if err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := NewLPWriter(&plain).WriteWindows(cs); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(def, plain.Bytes()) {
		t.Fatalf("profile influx differs from the default:\n%s\n%s", def, plain.Bytes())
	}
	num, err := encodeProfile(t, ProfileNumeric, cs)
	if err != nil {
		t.Fatal(err)
	}
	dk, dp := decode(t, def)
	nk, np := decode(t, num)
	if !slices.Equal(dk, nk) {
		t.Fatalf("series differ: %v vs %v", dk, nk)
	}
	// What each string value must become.
	want := map[string]map[string]int64{
		"tpsmon_gpu,gpu=0,host=h,uuid=GPU-x": {"energy_source_code": 2, "error_code": 1},
		"tpsmon_server,engine=vllm,gpus=0,host=h,server=s": {"source_code": 2, "spec_finding_code": 1, "state_code": 8,
			"state_sleeping": 1, "suspect_gpu_idle": 1, "suspect_above_ceiling": 1, "ceiling_finding_code": 3,
			"latency_source_code": 2, "latency_reason_code": 1, "slo_miss_phase_code": 2, "ttft_basis_code": 3},
		"tpsmon_server,host=h,server=t": {"source_code": 1, "spec_finding_code": 0, "state_code": 7, "state_ok": 1},
	}
	for _, k := range dk {
		d, n := dp[k], np[k]
		strs := 0
		for f, v := range d {
			if _, isStr := v.(string); isStr {
				strs++
				if _, ok := n[f]; ok {
					t.Errorf("%s: string field %s is still in the numeric profile", k, f)
				}
				continue
			}
			if n[f] != v {
				t.Errorf("%s: %s = %v in numeric, %v in influx", k, f, n[f], v)
			}
		}
		if strs == 0 {
			t.Errorf("%s: the test window has no string field", k)
		}
		for f, v := range n {
			if _, ok := d[f]; ok {
				continue
			}
			w, pinned := want[k][f]
			switch {
			case pinned && v != w:
				t.Errorf("%s: %s = %v, want %d", k, f, v, w)
			case !pinned && v != int64(0):
				t.Errorf("%s: %s = %v, want 0", k, f, v)
			}
		}
		for f := range want[k] {
			if _, ok := n[f]; !ok {
				t.Errorf("%s: numeric field %s missing", k, f)
			}
		}
		// Every state and every rule has its 0/1 field where the string is.
		if _, ok := d[schema.FieldState]; ok {
			for _, s := range schema.States {
				if _, ok := n[schema.NumericField(schema.FieldState, s)]; !ok {
					t.Errorf("%s: no %s", k, schema.NumericField(schema.FieldState, s))
				}
			}
		}
		_, hasSuspect := d[schema.FieldSuspect]
		for _, r := range analysis.Rules {
			if _, ok := n[schema.NumericField(schema.FieldSuspect, r)]; ok != hasSuspect {
				t.Errorf("%s: %s present %v, suspect present %v", k, schema.NumericField(schema.FieldSuspect, r), ok, hasSuspect)
			}
		}
	}
	// The fields of a numeric line are sorted by key as the default's are.
	for _, line := range strings.Split(strings.TrimSpace(string(num)), "\n") {
		fs := strings.Split(strings.Split(line, " ")[1], ",")
		names := make([]string, len(fs))
		for i, f := range fs {
			names[i], _, _ = strings.Cut(f, "=")
		}
		if !slices.IsSorted(names) {
			t.Errorf("fields not sorted: %s", line)
		}
	}
}

// TestNumericRefusesUnknown: a string value without a code is an error
// naming it, and its point is not written, never given a wrong number.
func TestNumericRefusesUnknown(t *testing.T) {
	for _, c := range []struct {
		name string
		w    analysis.ServerWindow
		want string
	}{
		{"state", analysis.ServerWindow{State: "napping", ServerWindow: window.ServerWindow{Source: schema.SourceLog}}, `state "napping"`},
		{"source", analysis.ServerWindow{State: schema.StateOK, ServerWindow: window.ServerWindow{Source: "guess"}}, `source_code: value "guess"`},
		{"suspect", analysis.ServerWindow{State: schema.StateOK, Suspect: window.Some("gpu_idle,made_up"),
			ServerWindow: window.ServerWindow{Source: schema.SourceLog}}, `suspect rule "made_up"`},
	} {
		c.w.Start, c.w.Server = start, "s"
		b, err := encodeProfile(t, ProfileNumeric, []analysis.Closed{{Start: start, Servers: []analysis.ServerWindow{c.w}}})
		if err == nil || !strings.Contains(err.Error(), c.want) || len(b) != 0 {
			t.Errorf("%s: %q, err %v; want no line and an error with %q", c.name, b, err, c.want)
		}
	}
}

func TestParseProfile(t *testing.T) {
	for s, want := range map[string]Profile{"": ProfileInflux, "influx": ProfileInflux, "numeric": ProfileNumeric} {
		if p, err := ParseProfile(s); err != nil || p != want {
			t.Errorf("ParseProfile(%q) = %q, %v", s, p, err)
		}
	}
	if _, err := ParseProfile("Numeric"); err == nil || !strings.Contains(err.Error(), `"Numeric"`) {
		t.Errorf("ParseProfile(Numeric): %v", err)
	}
}
