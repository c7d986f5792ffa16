package sink

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/window"
)

// hostile are label values and messages tpsmon can be handed: by a
// server's metrics page (model_name), the configuration (server, host)
// or an error text.
var hostile = []struct {
	name  string
	value string
	exact bool // line protocol can carry it as is
}{
	{"trailing backslash", `x\`, false},
	{"two trailing backslashes", `x\\`, false},
	{"lone backslash", `\`, false},
	{"inner backslash", `a\b`, true},
	{"escaped-looking comma", `a\,b`, true},
	{"escaped-looking space", `a\ b`, true},
	{"newline", "a\nb", false},
	{"carriage return and tab", "a\r\tb", false},
	{"double quotes", `say "hi"`, true},
	{"quote and backslash", `\"`, true},
	{"comma", "a,b", true},
	{"equals", "a=b", true},
	{"spaces", " a b ", true},
	{"empty", "", true},
	{"invalid UTF-8", "a\xff\xfeb", false},
	{"delete and NUL", "a\x7f\x00b", false},
	{"C1 control (next line)", "a\u0085b", false},
	{"unicode", "Llama-3.1-8B-Instruct ünï 模型", true},
	{"70 KB label", strings.Repeat("m", 70<<10), false}, // over InfluxDB's key length: cut
}

// TestHostileValuesRoundTrip writes every hostile value as a GPU window's
// tags (name, server) and its error to the real InfluxDB 1.8 and reads it
// back: InfluxDB takes every line, and stores exactly what TagValue and
// StringValue say (the value itself wherever line protocol can carry it).
func TestHostileValuesRoundTrip(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "hostile")
	in, err := NewInflux(InfluxConfig{URL: base, Bucket: db + "/autogen", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := NewEncoder()
	ts := time.Unix(1_700_000_000, 0)
	var lines []byte
	for i, h := range hostile {
		at := ts.Add(time.Duration(i) * time.Second)
		w := analysis.GPUWindow{GPUWindow: window.GPUWindow{Start: at, Length: time.Second, Host: "h", Label: "0", UUID: "GPU-0", Name: h.value,
			Server: h.value, Samples: int64(i), Error: window.Some(h.value)}}
		if lines, err = enc.Append(lines, GPUPoint(w)); err != nil {
			t.Fatalf("%s: %v", h.name, err)
		}
	}
	if err := in.Write(context.Background(), lines); err != nil {
		t.Fatalf("InfluxDB refused the lines: %v\n%s", err, lines)
	}
	series := influxtest.Query(t, base, db, `SELECT samples, "error", "name", server FROM tpsmon_gpu`)
	if len(series) != 1 {
		t.Fatalf("%d series", len(series))
	}
	rows := series[0].Rows()
	if len(rows) != len(hostile) {
		t.Fatalf("read back %d points, wrote %d", len(rows), len(hostile))
	}
	for _, r := range rows {
		i := int(mustInt(t, r[schema.FieldSamples]))
		h := hostile[i]
		str := func(k string) string {
			s, _ := r[k].(string) // a missing tag reads as null
			return s
		}
		if got, want := str(schema.TagName), TagValue(h.value); got != want {
			t.Errorf("%s: tag read back %q, want %q", h.name, got, want)
		}
		if got, want := str(schema.TagServer), TagValue(h.value); got != want {
			t.Errorf("%s: server tag read back %q, want %q", h.name, got, want)
		}
		if got, want := str(schema.FieldError), StringValue(h.value); got != want {
			t.Errorf("%s: field read back %q, want %q", h.name, got, want)
		}
		if h.exact && (TagValue(h.value) != h.value || StringValue(h.value) != h.value) {
			t.Errorf("%s: %q changed though line protocol carries it", h.name, h.value)
		}
		if !h.exact && strings.ContainsAny(TagValue(h.value), "\n\r\t") {
			t.Errorf("%s: control characters left in %q", h.name, TagValue(h.value))
		}
	}
}

func mustInt(t *testing.T, v any) int64 {
	t.Helper()
	n, ok := v.(interface{ Int64() (int64, error) })
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// TestWindowsEncodeAsTheirPoints: LPWriter encodes windows straight from
// their typed values; its lines and its error are what encoding Points
// gives, for windows with every value present, hostile tags and strings,
// and values line protocol refuses.
func TestWindowsEncodeAsTheirPoints(t *testing.T) {
	var full analysis.ServerWindow
	present(&full.ServerWindow)
	full.Start, full.Length, full.State, full.GPUs = time.Unix(1_700_000_000, 0), 10*time.Second, schema.StateOK, []string{"0", "1"}
	full.SystemTPS.V, full.Tokens.V = 1234.5, 12345
	var gpu analysis.GPUWindow
	present(&gpu.GPUWindow)
	gpu.Start, gpu.Length, gpu.Util.V, gpu.EnergySource.V = full.Start, full.Length, 99.5, schema.EnergyCounter
	var cs []analysis.Closed
	for i, h := range hostile {
		s, g := full, gpu
		s.Start = s.Start.Add(time.Duration(i) * 10 * time.Second)
		g.Start = s.Start
		s.Model, s.Host, g.Name, g.Error = h.value, h.value, h.value, window.Some(h.value)
		cs = append(cs, analysis.Closed{Start: s.Start, GPUs: []analysis.GPUWindow{g}, Servers: []analysis.ServerWindow{s}})
	}
	nan := full
	nan.SystemTPS = window.Some(math.NaN())
	inf := gpu
	inf.PowerW = window.Some(math.Inf(1))
	cs = append(cs, analysis.Closed{Start: nan.Start, GPUs: []analysis.GPUWindow{inf, gpu}, Servers: []analysis.ServerWindow{nan, full}})
	for _, tc := range []struct {
		name string
		cs   []analysis.Closed
	}{{"hostile", cs[:len(hostile)]}, {"refused values", cs}, {"none", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			var got strings.Builder
			gotErr := NewLPWriter(&got).WriteWindows(tc.cs)
			var want []byte
			var wantErr error
			enc := NewEncoder()
			for _, p := range Points(tc.cs) {
				var err error
				if want, err = enc.Append(want, p); err != nil && wantErr == nil {
					wantErr = err
				}
			}
			if got.String() != string(want) {
				t.Errorf("lines:\n%s\nPoints encode as:\n%s", got.String(), want)
			}
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Errorf("error %v, Points give %v", gotErr, wantErr)
			}
		})
	}
}
