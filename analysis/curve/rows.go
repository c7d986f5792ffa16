package curve

import (
	"strings"

	"github.com/tpsmon/tpsmon/schema"
)

// RawFields are the tpsmon_server fields a window of the curve is read
// from (window_s may be missing on old points: the caller then knows the
// length from their spacing).
var RawFields = []string{schema.FieldRunning, schema.FieldSystemTPS, schema.FieldPerUserTPS,
	schema.FieldTokens, schema.FieldPromptTokens, schema.FieldWindowS, schema.FieldCoverage}

// KeyTags are the tags that make windows one curve.
var KeyTags = []string{schema.TagHost, schema.TagServer, schema.TagEngine, schema.TagEngineVersion, schema.TagModel, schema.TagGPUs}

// KeyOf is the curve key of a series' tags.
func KeyOf(tags map[string]string) Key {
	return Key{Host: tags[schema.TagHost], Server: tags[schema.TagServer], Engine: tags[schema.TagEngine],
		Version: tags[schema.TagEngineVersion], Model: tags[schema.TagModel], GPUs: tags[schema.TagGPUs]}
}

// GPUCount is how many GPUs a gpus tag names.
func GPUCount(gpus string) int {
	if gpus == "" {
		return 0
	}
	return strings.Count(gpus, ",") + 1
}

// WindowOf reads a window from a query row of RawFields; num turns a
// column into a number (absent: false). seconds is the window's length
// when the row has no window_s (0: unknown).
func WindowOf(tags map[string]string, row map[string]any, num func(any) (float64, bool), seconds float64) Window {
	opt := func(f string) Opt {
		v, ok := num(row[f])
		return Opt{V: v, OK: ok}
	}
	w := Window{Key: KeyOf(tags), GPUs: GPUCount(tags[schema.TagGPUs]), Seconds: seconds,
		Running: opt(schema.FieldRunning), SystemTPS: opt(schema.FieldSystemTPS), PerUserTPS: opt(schema.FieldPerUserTPS),
		Tokens: opt(schema.FieldTokens), PromptTokens: opt(schema.FieldPromptTokens), Coverage: opt(schema.FieldCoverage)}
	if s := opt(schema.FieldWindowS); s.OK {
		w.Seconds = s.V
	}
	return w
}
