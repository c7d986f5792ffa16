package otlp

import (
	"errors"
	"fmt"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
)

// Scope names tpsmon's metrics in OTLP.
var Scope = instrumentation.Scope{Name: "github.com/tpsmon/tpsmon/sink/otlp"}

// Resource is the resource every export carries: service.name tpsmon
// only. The host, server and GPU are each point's attributes, as they are
// the /metrics gauges' labels; a version here would start new series in
// stores that make resource attributes labels at every upgrade.
var Resource = resource.NewSchemaless(attribute.String("service.name", "tpsmon"))

// Decode turns numeric-profile line protocol (sink.ProfileNumeric) into
// OTLP gauges: each field of a point is a data point of the metric
// sink.WindowMetricOf names, in the name's unit, with the point's tags as
// attributes (a one-hot field with its label too) and the point's time.
// It returns how many points it read. A line that is not line protocol,
// not a window's measurement, or holds a string field is an error that
// names it: the batch is refused, never exported without it. A numeric
// field without a name is left out, as /metrics leaves it out
// (TestWindowMetricsNameEveryField keeps there none).
func Decode(lines []byte) (*metricdata.ResourceMetrics, int, error) {
	dec := lineprotocol.NewDecoderWithBytes(lines)
	gauges := map[string]int{} // index in metrics by name
	var metrics []metricdata.Metrics
	var points [][]metricdata.DataPoint[float64] // of metrics[i]
	var kvs []attribute.KeyValue
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
			kvs = append(kvs, attribute.String(string(k), string(v)))
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
		// One set of the tags for every field of the line; a one-hot
		// field's adds its label.
		base := attribute.NewSet(kvs...)
		for _, f := range fs {
			wm, ok := sink.WindowMetricOf(measurement, f.key)
			if !ok {
				continue
			}
			attrs := base
			if key, value := wm.Label(); key != "" {
				attrs = attribute.NewSet(append(kvs[:len(kvs):len(kvs)], attribute.String(key, value))...)
			}
			name := wm.FullName()
			i, ok := gauges[name]
			if !ok {
				i = len(metrics)
				gauges[name] = i
				// No Unit: the name carries it, and receivers that
				// translate OTLP to Prometheus names would add it again.
				metrics = append(metrics, metricdata.Metrics{Name: name, Description: wm.Help()})
				points = append(points, nil)
			}
			points[i] = append(points[i], metricdata.DataPoint[float64]{Attributes: attrs, Time: t, Value: wm.Value(f.v)})
		}
		n++
	}
	if err := dec.Err(); err != nil {
		return nil, 0, err
	}
	for i := range metrics {
		metrics[i].Data = metricdata.Gauge[float64]{DataPoints: points[i]}
	}
	return &metricdata.ResourceMetrics{Resource: Resource,
		ScopeMetrics: []metricdata.ScopeMetrics{{Scope: Scope, Metrics: metrics}}}, n, nil
}
