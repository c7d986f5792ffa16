package sink

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

var start = time.Unix(1_700_000_000, 0)

// TestWindowLines pins the line of a window: tags and fields sorted, an
// empty tag left out, a measured 0 written and a missing value not.
func TestWindowLines(t *testing.T) {
	tests := []struct {
		name string
		cs   []analysis.Closed
		want string
	}{
		{"server, some values missing", []analysis.Closed{{Start: start, Servers: []analysis.ServerWindow{{State: schema.StateIdle, ServerWindow: window.ServerWindow{
			Start: start, Length: 10 * time.Second, Host: "h", Server: "s", Engine: "vllm", GPUs: []string{"0", "1"},
			Tokens: window.Some[int64](0), Running: window.Some(0.0), SystemTPS: window.Some(10.5),
			Coverage: 0.5, Source: schema.SourceMetrics}}}}},
			`tpsmon_server,engine=vllm,gpus=0\,1,host=h,server=s coverage=0.5,running=0,source="metrics",state="idle",system_tps=10.5,tokens=0i,window_s=10 1700000000000` + "\n"},
		{"lost GPU, then a server down", []analysis.Closed{{Start: start, GPUs: []analysis.GPUWindow{{GPUWindow: window.GPUWindow{
			Start: start, Length: 10 * time.Second, Host: "h", Label: "0/gi1", UUID: "GPU-x", Name: "H100",
			Error: window.Some("gpu 0: lost")}}}, Servers: []analysis.ServerWindow{{State: schema.StateDown, ServerWindow: window.ServerWindow{
			Start: start, Length: 10 * time.Second, Host: "h", Server: "s", Source: schema.SourceLog}}}}},
			`tpsmon_gpu,gpu=0/gi1,host=h,name=H100,uuid=GPU-x coverage=0,error="gpu 0: lost",samples=0i,window_s=10 1700000000000` + "\n" +
				`tpsmon_server,host=h,server=s coverage=0,source="log",state="down",window_s=10 1700000000000` + "\n"},
	}
	for _, tt := range tests {
		var b strings.Builder
		if err := NewLPWriter(&b).WriteWindows(tt.cs); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, b.String(), tt.want)
		}
	}
}

// present sets every optional value of the struct *p.
func present(p any) {
	v := reflect.ValueOf(p).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Struct && f.FieldByName("OK").IsValid() {
			f.FieldByName("OK").SetBool(true)
		}
	}
}

func keys(p Point) (tags, fields []string) {
	for _, t := range p.Tags {
		tags = append(tags, t.Key)
	}
	for _, f := range p.Fields {
		fields = append(fields, f.Key)
	}
	return tags, fields
}

// TestPointsCarrySchema: a window with every value present writes exactly
// the tags and fields schema lists for its measurement.
func TestPointsCarrySchema(t *testing.T) {
	var sw analysis.ServerWindow
	present(&sw.ServerWindow)
	present(&sw) // the analysis's own fields
	sw.Latency, sw.SLOMiss = fullLatency(), "queue"
	sw.EngineVersion = "0.6.3" // absent when unknown (TestEngineVersionTag)
	var gw analysis.GPUWindow
	present(&gw.GPUWindow)
	for _, c := range []struct {
		p                 Point
		measurement       string
		wantTags, wantFld []string
	}{
		{ServerPoint(sw), schema.Server, schema.ServerTags, schema.ServerFields},
		{GPUPoint(gw), schema.GPU, schema.GPUTags, schema.GPUFields},
	} {
		tags, fields := keys(c.p)
		if c.p.Measurement != c.measurement {
			t.Errorf("measurement %s, want %s", c.p.Measurement, c.measurement)
		}
		if want := slices.Sorted(slices.Values(c.wantTags)); !slices.Equal(tags, want) {
			t.Errorf("%s tags %v, schema says %v", c.measurement, tags, want)
		}
		if want := slices.Sorted(slices.Values(c.wantFld)); !slices.Equal(fields, want) {
			t.Errorf("%s fields %v, schema says %v", c.measurement, fields, want)
		}
	}
}

// fullLatency is a latency summary with every value present: histogram
// quantiles with their bounds, an exact attainment and goodput, a TTFT
// basis (which only request lines have: every field is written).
func fullLatency() latency.Summary {
	q := latency.Quantile{Value: 0.2, OK: true, Lo: 0.1, Hi: 0.25, Bounded: true, N: 100}
	s := latency.Summary{Source: latency.SourceHistogram, Reason: "ttft: histogram counter reset", TTFTBasis: "http",
		Attainment:   latency.Attainment{Lo: 0.9, Hi: 0.9, Exact: true, OK: true, Requests: 100, MetLo: 90, MetHi: 90},
		GoodputRPSLo: 9, GoodputRPSHi: 9, GoodputTPSLo: 900, GoodputTPSHi: 900}
	for i := range s.TTFT {
		s.TTFT[i], s.ITL[i] = q, q
	}
	for i := range s.E2E {
		s.E2E[i], s.Queue[i], s.PerUserTPS[i] = q, q, q
	}
	return s
}

// The engine version is a tag where known and absent, not empty, where
// not: in line protocol and in replay's json alike.
func TestEngineVersionTag(t *testing.T) {
	var sw analysis.ServerWindow
	sw.Host, sw.Server, sw.Engine = "h", "s", "ollama"
	p := ServerPoint(sw)
	if _, ok := p.TagMap()[schema.TagEngineVersion]; ok {
		t.Errorf("unknown version in the tags: %v", p.TagMap())
	}
	sw.EngineVersion = "0.34.1"
	if v := ServerPoint(sw).TagMap()[schema.TagEngineVersion]; v != "0.34.1" {
		t.Errorf("engine_version %q, want 0.34.1", v)
	}
	var e Encoder
	for _, c := range []struct{ version, want string }{{"", "tpsmon_server,engine=ollama,host=h,server=s "}, {"0.34.1", "tpsmon_server,engine=ollama,engine_version=0.34.1,host=h,server=s "}} {
		sw.EngineVersion = c.version
		b, err := e.Append(nil, ServerPoint(sw))
		if err != nil || !strings.HasPrefix(string(b), c.want) {
			t.Errorf("version %q: %q (%v), want it to start %q", c.version, b, err, c.want)
		}
	}
}
