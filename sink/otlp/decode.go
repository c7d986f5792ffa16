package otlp

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
)

// scopeName names tpsmon's metrics in OTLP (the instrumentation scope).
const scopeName = "github.com/tpsmon/tpsmon/sink/otlp"

// newResource is the resource every export carries: service.name tpsmon
// only. The host, server and GPU are each point's attributes, as they are
// the /metrics gauges' labels; a version here would start new series in
// stores that make resource attributes labels at every upgrade.
func newResource() *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: []*commonpb.KeyValue{stringKV("service.name", "tpsmon")}}
}

func newScope() *commonpb.InstrumentationScope {
	return &commonpb.InstrumentationScope{Name: scopeName}
}

func stringKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// attrSet returns kvs sorted by key, a key given twice once with its last
// value: a point's attributes are a set, and receivers that make them
// labels want each name once.
func attrSet(kvs []*commonpb.KeyValue) []*commonpb.KeyValue {
	out := slices.Clone(kvs)
	slices.SortStableFunc(out, func(a, b *commonpb.KeyValue) int { return cmp.Compare(a.Key, b.Key) })
	for i := len(out) - 1; i > 0; i-- {
		if out[i-1].Key == out[i].Key {
			out = slices.Delete(out, i-1, i) // keep the later one
		}
	}
	return out
}

// Decode turns numeric-profile line protocol (sink.ProfileNumeric) into
// OTLP gauges: each field of a point is a data point of the metric
// sink.WindowMetricOf names, in the name's unit, with the point's tags as
// attributes (a one-hot field with its label too) and the point's time.
// It returns how many points it read. A line that is not line protocol,
// not a window's measurement, or holds a string field is an error that
// names it: the batch is refused, never exported without it. A numeric
// field without a name is left out, as /metrics leaves it out
// (TestWindowMetricsNameEveryField keeps there none).
func Decode(lines []byte) (*metricpb.ResourceMetrics, int, error) {
	dec := lineprotocol.NewDecoderWithBytes(lines)
	gauges := map[string]*metricpb.Gauge{}
	var metrics []*metricpb.Metric
	var kvs []*commonpb.KeyValue
	n := 0
	for line := 1; dec.Next(); line++ {
		bad := func(err error) error { return fmt.Errorf("point %d: %w", line, err) }
		m, err := dec.Measurement()
		if err != nil {
			return nil, 0, bad(err)
		}
		measurement := string(m)
		if measurement != schema.Server && measurement != schema.GPU {
			return nil, 0, bad(fmt.Errorf("measurement %q is no window's (%s, %s)", measurement, schema.Server, schema.GPU))
		}
		kvs = kvs[:0]
		for {
			k, v, err := dec.NextTag()
			if err != nil {
				return nil, 0, bad(err)
			}
			if k == nil {
				break
			}
			kvs = append(kvs, stringKV(string(k), string(v)))
		}
		type field struct {
			key string
			v   float64
		}
		var fs []field
		for {
			k, v, err := dec.NextField()
			if err != nil {
				return nil, 0, bad(err)
			}
			if k == nil {
				break
			}
			var x float64
			switch v.Kind() {
			case lineprotocol.Float:
				x = v.FloatV()
			case lineprotocol.Int:
				x = float64(v.IntV())
			case lineprotocol.Uint:
				x = float64(v.UintV())
			case lineprotocol.Bool:
				if v.BoolV() {
					x = 1
				}
			default:
				return nil, 0, bad(fmt.Errorf("%s field %s is a %v: not the numeric profile (sink.influx.profile numeric)", measurement, k, v.Kind()))
			}
			fs = append(fs, field{string(k), x})
		}
		t, err := dec.Time(lineprotocol.Millisecond, time.Time{})
		if err != nil {
			return nil, 0, bad(err)
		}
		if t.IsZero() {
			return nil, 0, bad(errors.New("no timestamp: a window's point has its start"))
		}
		if t.Before(time.Unix(0, 0)) {
			return nil, 0, bad(fmt.Errorf("timestamp %s: before 1970, which OTLP cannot carry", t.UTC().Format(time.RFC3339)))
		}
		ns := uint64(t.UnixNano())
		// One set of the tags for every field of the line (the data
		// points share it: it is only read); a one-hot field's adds its
		// label.
		base := attrSet(kvs)
		for _, f := range fs {
			wm, ok := sink.WindowMetricOf(measurement, f.key)
			if !ok {
				continue
			}
			attrs := base
			if key, value := wm.Label(); key != "" {
				attrs = attrSet(append(kvs[:len(kvs):len(kvs)], stringKV(key, value)))
			}
			name := wm.FullName()
			g, ok := gauges[name]
			if !ok {
				g = &metricpb.Gauge{}
				gauges[name] = g
				// No Unit: the name carries it, and receivers that
				// translate OTLP to Prometheus names would add it again.
				metrics = append(metrics, &metricpb.Metric{Name: name, Description: wm.Help(),
					Data: &metricpb.Metric_Gauge{Gauge: g}})
			}
			g.DataPoints = append(g.DataPoints, &metricpb.NumberDataPoint{Attributes: attrs, TimeUnixNano: ns,
				Value: &metricpb.NumberDataPoint_AsDouble{AsDouble: wm.Value(f.v)}})
		}
		n++
	}
	if err := dec.Err(); err != nil {
		return nil, 0, err
	}
	return &metricpb.ResourceMetrics{Resource: newResource(),
		ScopeMetrics: []*metricpb.ScopeMetrics{{Scope: newScope(), Metrics: metrics}}}, n, nil
}
