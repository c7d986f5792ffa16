// Package api holds the JSON of tpsmon's read-only HTTP API: what the
// daemon serves on its http.listen address and what `tpsmon top` reads.
// It has no dependencies, so a client need not link the daemon.
package api

import "time"

// WindowsPath serves a Windows.
const WindowsPath = "/api/v1/windows"

// MaxHistory is the most closed windows per series the daemon keeps and a
// request may ask for (?history=N).
const MaxHistory = 60

// Windows is the answer to GET WindowsPath.
type Windows struct {
	Host string `json:"host"`
	// Now is the daemon's clock when it answered.
	Now time.Time `json:"now"`
	// WindowSeconds is the window length.
	WindowSeconds float64 `json:"window_seconds"`
	// Closed holds the last closed windows of every server and GPU, oldest
	// first: up to ?history=N per series (default 1).
	Closed []Point `json:"closed"`
	// Open holds the window still open: per server and GPU, its start
	// (Time) and what the readings so far say, in the fields of the
	// closed windows (tokens per second so far, the latest gauges; for a
	// GPU, its latest reading, which may precede the window by less than
	// a window).
	Open []Point `json:"open"`
}

// Point is one window of one series, in the shape of `replay --format json`;
// package schema names its measurements, tags and fields.
type Point struct {
	Measurement string            `json:"measurement"`
	Time        time.Time         `json:"time"`
	Tags        map[string]string `json:"tags"`
	Fields      map[string]any    `json:"fields"`
}

// Float returns numeric field k; false when it is absent or not a number.
func (p Point) Float(k string) (float64, bool) {
	switch v := p.Fields[k].(type) {
	case float64:
		return v, true
	case int64:
		return float64(v), true
	case int:
		return float64(v), true
	}
	return 0, false
}

// String returns string field k, or "".
func (p Point) String(k string) string {
	s, _ := p.Fields[k].(string)
	return s
}
