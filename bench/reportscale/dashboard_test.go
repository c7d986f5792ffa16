package main

import (
	"testing"
	"time"
)

// Grafana's $__interval: the range over the points, rounded to its nice
// intervals, at least the panel's min interval, written as InfluxQL.
func TestGrafanaInterval(t *testing.T) {
	for _, c := range []struct {
		span   time.Duration
		points float64
		min    time.Duration
		want   string
	}{
		{24 * time.Hour, 960, 0, "2m"}, // 90 s: the 2m step starts there
		{24 * time.Hour, 1920, 0, "1m"},
		{6 * time.Hour, 300, 0, "1m"},
		{time.Hour, 100, 0, "30s"},
		{time.Hour, 30, 0, "2m"},
		{time.Hour, 320, 0, "10s"},
		{7 * 24 * time.Hour, 100, time.Hour, "2h"},
		{6 * time.Hour, 960, time.Hour, "1h"}, // the min interval wins
		{time.Hour, 1920, 0, "2s"},
		{365 * 24 * time.Hour, 10, 0, "30d"},
	} {
		if got := influxDuration(grafanaInterval(c.span, c.points, c.min)); got != c.want {
			t.Errorf("%v over %v points (min %v): %s, want %s", c.span, c.points, c.min, got, c.want)
		}
	}
}

func TestRelative(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{"now-6h", 6 * time.Hour, false}, {"now", 0, false}, {"7d", 7 * 24 * time.Hour, false}, {"now-1w", 7 * 24 * time.Hour, false},
		{"now-6x", 0, true}, {"now/d", 0, true},
	} {
		got, err := relative(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("relative(%q) = %v, %v; want %v (error: %v)", c.in, got, err, c.want, c.bad)
		}
	}
}
