package agent

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
)

// windowMetrics serves the last closed window of every server and GPU on
// /metrics (http.window_metrics): one gauge per field of the numeric
// profile (sink.NumericServerFields), named by sink.WindowMetricOf as the
// OTLP push names them, labelled with
// the point's tags (cut as the sink cuts them), stamped with the window's
// start. The series are those of the last closed window only: a server or
// GPU that leaves the configuration, or is no longer discovered, has no
// window and so no series. Cardinality is the servers' and GPUs' count
// times their fields (up to 94 a server with its states, rules and latency, 19 a
// GPU). It is an output of the pipeline: it keeps the fields when a
// window closes, and the first scrape after makes the gauges.
type windowMetrics struct {
	descs map[string]map[string]gauge // by measurement and field; read only
	mu    sync.Mutex
	// points are the last closed window's, count their fields; metrics
	// their gauges once a scrape made them, nil before.
	points  []wmPoint
	count   int
	metrics []prometheus.Metric
}

func newWindowMetrics() *windowMetrics { return &windowMetrics{descs: newDescs()} }

// wmPoint is one window's point as the gauges need it: its tag values in
// the order of its measurement's label names, its start and its numeric
// fields.
type wmPoint struct {
	measurement string
	labels      []string
	start       time.Time
	fields      []sink.Field
}

// Describe sends the Desc of every named field.
func (wm *windowMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, gs := range wm.descs {
		for _, g := range gs {
			ch <- g.desc
		}
	}
}

// Collect sends the last closed window's gauges, made at the first scrape
// after it closed: a daemon nobody scrapes pays only for keeping the
// window's fields.
func (wm *windowMetrics) Collect(ch chan<- prometheus.Metric) {
	wm.mu.Lock()
	if wm.metrics == nil {
		wm.metrics = make([]prometheus.Metric, 0, wm.count)
		for _, p := range wm.points {
			wm.metrics = wm.appendPoint(wm.metrics, p)
		}
	}
	ms := wm.metrics
	wm.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
}

// WriteWindows keeps the fields of the last of cs; a server or GPU whose
// window has a string value without a code is left out and named in the
// error.
func (wm *windowMetrics) WriteWindows(cs []analysis.Closed) error {
	if len(cs) == 0 {
		return nil
	}
	c := &cs[len(cs)-1]
	points := make([]wmPoint, 0, len(c.GPUs)+len(c.Servers))
	count := 0
	var errs []error
	add := func(measurement string, tags []sink.Tag, start time.Time, fs []sink.Field) {
		p := wmPoint{measurement: measurement, labels: make([]string, len(tags)), start: start, fields: fs}
		for i, t := range tags {
			p.labels[i] = sink.TagValue(t.Value)
		}
		points, count = append(points, p), count+len(fs)
	}
	for i := range c.GPUs {
		g := &c.GPUs[i]
		fs, err := sink.NumericGPUFields(*g)
		if err != nil {
			errs = append(errs, fmt.Errorf("window metrics of gpu %s: %w", g.Label, err))
			continue
		}
		add(schema.GPU, sink.GPUTags(*g), g.Start, fs)
	}
	for i := range c.Servers {
		s := &c.Servers[i]
		fs, err := sink.NumericServerFields(*s)
		if err != nil {
			errs = append(errs, fmt.Errorf("window metrics of server %s: %w", s.Server, err))
			continue
		}
		add(schema.Server, sink.ServerTags(*s), s.Start, fs)
	}
	wm.mu.Lock()
	wm.points, wm.count, wm.metrics = points, count, nil
	wm.mu.Unlock()
	// A window without a numeric form is left out, the others served.
	return errors.Join(errs...)
}

// appendPoint appends the gauges of one window's point.
func (wm *windowMetrics) appendPoint(ms []prometheus.Metric, p wmPoint) []prometheus.Metric {
	for _, f := range p.fields {
		d, ok := wm.descs[p.measurement][f.Key]
		if !ok {
			continue // a field without a name yet: TestWindowMetricsNameEveryField says so
		}
		var v float64
		switch x := f.Value.(type) {
		case float64:
			v = x
		case int64:
			v = float64(x)
		default:
			continue
		}
		v = d.m.Value(v)
		lv := p.labels
		if d.value != "" {
			lv = append(slices.Clip(lv), d.value)
		}
		cm, err := prometheus.NewConstMetric(d.desc, prometheus.GaugeValue, v, lv...)
		if err != nil {
			continue // not a label set the name carries: the registry would refuse the scrape
		}
		ms = append(ms, prometheus.NewMetricWithTimestamp(p.start, cm))
	}
	return ms
}

// gauge is a field's Desc, its name and its one-hot label value.
type gauge struct {
	desc  *prometheus.Desc
	m     sink.WindowMetric
	value string
}

// newDescs makes the Desc of every named field (sink.WindowMetricOf):
// labelled with its measurement's tags in the points' order (sorted), and
// a one-hot field with its label after them.
func newDescs() map[string]map[string]gauge {
	tags := map[string][]string{
		schema.Server: slices.Sorted(slices.Values(schema.ServerTags)),
		schema.GPU:    slices.Sorted(slices.Values(schema.GPUTags)),
	}
	out := map[string]map[string]gauge{}
	for measurement, labels := range tags {
		out[measurement] = map[string]gauge{}
		for _, field := range sink.WindowMetricFields(measurement) {
			m, _ := sink.WindowMetricOf(measurement, field)
			ls := labels
			key, value := m.Label()
			if key != "" {
				ls = append(slices.Clip(labels), key)
			}
			out[measurement][field] = gauge{prometheus.NewDesc(m.FullName(), m.Help(), ls, nil), m, value}
		}
	}
	return out
}
