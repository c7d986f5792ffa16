package sink

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// Point is one line of tpsmon's schema: what every output writes. Tags
// and fields are sorted by key; a value the window lacks is no field.
type Point struct {
	Measurement string
	Tags        []Tag
	Fields      []Field
	Time        time.Time
}

// Tag is one tag of a Point; an empty value is kept here (JSON shows it)
// and left out of line protocol.
type Tag struct{ Key, Value string }

// Field is one field of a Point: a float64, an int64 or a string.
type Field struct {
	Key   string
	Value any
}

// Points returns the points of closed windows in order: per window its
// GPUs, then its servers.
func Points(cs []analysis.Closed) []Point {
	out := make([]Point, 0, analysis.Count(cs))
	for _, c := range cs {
		for _, g := range c.GPUs {
			out = append(out, GPUPoint(g))
		}
		for _, s := range c.Servers {
			out = append(out, ServerPoint(s))
		}
	}
	return out
}

// typed is one field of a window with its value as it was measured: the
// line protocol encoder takes it as it is, where a Field's any would cost
// an allocation per number.
type typed struct {
	key  string
	kind byte // 'f', 'i' or 's'
	f    float64
	i    int64
	s    string
}

// value is the field's value as a Field holds it.
func (t typed) value() any {
	switch t.kind {
	case 'f':
		return t.f
	case 'i':
		return t.i
	}
	return t.s
}

// fields collects the present values of a window.
type fields []typed

func (f *fields) float(k string, v window.Opt[float64]) {
	if v.OK {
		*f = append(*f, typed{key: k, kind: 'f', f: v.V})
	}
}

func (f *fields) int(k string, v window.Opt[int64]) {
	if v.OK {
		*f = append(*f, typed{key: k, kind: 'i', i: v.V})
	}
}

func (f *fields) str(k string, v window.Opt[string]) {
	if v.OK {
		*f = append(*f, typed{key: k, kind: 's', s: v.V})
	}
}

// boxed is f as a Point's fields.
func (f fields) boxed() []Field {
	out := make([]Field, len(f))
	for i, t := range f {
		out[i] = Field{t.key, t.value()}
	}
	return out
}

func sortedTags(t []Tag) []Tag {
	slices.SortFunc(t, func(a, b Tag) int { return cmp.Compare(a.Key, b.Key) })
	return t
}

// ServerPoint is the tpsmon_server point of a server's window. An
// unknown engine version is no tag (as in InfluxDB), not an empty one.
func ServerPoint(w analysis.ServerWindow) Point {
	tags := serverTags(nil, w)
	if w.EngineVersion == "" {
		tags = slices.DeleteFunc(tags, func(t Tag) bool { return t.Key == schema.TagEngineVersion })
	}
	return Point{Measurement: schema.Server, Tags: tags,
		Fields: serverFields(make(fields, 0, len(schema.ServerFields)), w).boxed(), Time: w.Start}
}

// serverTags appends the tags of a server's window to dst, in the order of
// their keys (TestPointsCarrySchema checks).
func serverTags(dst []Tag, w analysis.ServerWindow) []Tag {
	return append(dst, Tag{schema.TagEngine, w.Engine}, Tag{schema.TagEngineVersion, w.EngineVersion}, Tag{schema.TagGPUs, strings.Join(w.GPUs, ",")},
		Tag{schema.TagHost, w.Host}, Tag{schema.TagModel, w.Model}, Tag{schema.TagServer, w.Server})
}

// serverFields appends the present fields of a server's window to f. They
// are added in the order of their keys (TestPointsCarrySchema checks), so
// no point sorts them.
func serverFields(f fields, w analysis.ServerWindow) fields {
	f.str(schema.FieldCeilingFinding, w.Finding)
	f.float(schema.FieldCeilingTPS, w.CeilingTPS)
	f.float(schema.FieldCoverage, window.Some(w.Coverage))
	f.float(schema.FieldDecodeStepsPerS, w.DecodeStepsPerS)
	f.float(schema.FieldEnergyJ, w.EnergyJ)
	f.float(schema.FieldGPUUtil, w.GPUUtil)
	f.float(schema.FieldGPUUtilMax, w.GPUUtilMax)
	f.float(schema.FieldKVCacheUsage, w.KVCacheUsage)
	f.float(schema.FieldMBU, w.MBU)
	f.int(schema.FieldMemTotalBytes, w.MemTotalBytes)
	f.int(schema.FieldMemUsedBytes, w.MemUsedBytes)
	f.float(schema.FieldPerUserTPS, w.PerUserTPS)
	f.float(schema.FieldPowerW, w.PowerW)
	f.int(schema.FieldPreemptions, w.Preemptions)
	f.float(schema.FieldPrefixHitRate, w.PrefixHitRate)
	f.int(schema.FieldPromptCachedTokens, w.PromptCachedTokens)
	f.int(schema.FieldPromptComputedTokens, w.PromptComputedTokens)
	f.int(schema.FieldPromptExternalTokens, w.PromptExternalTokens)
	f.int(schema.FieldPromptTokens, w.PromptTokens)
	f.float(schema.FieldPromptTPS, w.PromptTPS)
	f.float(schema.FieldRunning, w.Running)
	f.float(schema.FieldSMActive, w.SMActive)
	f.str(schema.FieldSource, window.Some(w.Source))
	f.float(schema.FieldSpecAcceptRate, w.SpecAcceptRate)
	f.str(schema.FieldSpecFinding, w.SpecFinding)
	f.str(schema.FieldState, window.Some(w.State))
	f.str(schema.FieldSuspect, w.Suspect)
	f.float(schema.FieldSystemTPS, w.SystemTPS)
	f.int(schema.FieldTokens, w.Tokens)
	f.float(schema.FieldTokensPerJoule, w.TokensPerJoule)
	f.float(schema.FieldTokensPerStep, w.TokensPerStep)
	f.float(schema.FieldTPSPerGPU, w.TPSPerGPU)
	f.float(schema.FieldWaiting, w.Waiting)
	// The window's length travels with it: readers turn windows into time
	// from the data, not from their own configuration.
	f.float(schema.FieldWindowS, window.Some(w.Length.Seconds()))
	if w.Latency.Source != "" {
		return mergeFields(f, latencyFields(nil, w))
	}
	return f
}

// GPUPoint is the tpsmon_gpu point of a GPU's window.
func GPUPoint(w analysis.GPUWindow) Point {
	return Point{Measurement: schema.GPU, Tags: gpuTags(nil, w),
		Fields: gpuFields(make(fields, 0, len(schema.GPUFields)), w).boxed(), Time: w.Start}
}

// gpuTags appends the tags of a GPU's window to dst, in the order of their
// keys.
func gpuTags(dst []Tag, w analysis.GPUWindow) []Tag {
	return append(dst, Tag{schema.TagGPU, w.Label}, Tag{schema.TagHost, w.Host}, Tag{schema.TagName, w.Name},
		Tag{schema.TagServer, w.Server}, Tag{schema.TagUUID, w.UUID})
}

// gpuFields appends the present fields of a GPU's window to f, in the
// order of their keys, as serverFields does.
func gpuFields(f fields, w analysis.GPUWindow) fields {
	f.float(schema.FieldCoverage, window.Some(w.Coverage))
	f.float(schema.FieldDRAMActive, w.DRAMActive)
	f.float(schema.FieldEnergyJ, w.EnergyJ)
	f.str(schema.FieldEnergySource, w.EnergySource)
	f.str(schema.FieldError, w.Error)
	f.int(schema.FieldMemTotalBytes, w.MemTotalBytes)
	f.int(schema.FieldMemUsedBytes, w.MemUsedBytes)
	f.float(schema.FieldMemUtil, w.MemUtil)
	f.float(schema.FieldPowerW, w.PowerW)
	f.int(schema.FieldSamples, window.Some(w.Samples))
	f.float(schema.FieldSMActive, w.SMActive)
	f.float(schema.FieldSMClockMHz, w.SMClockMHz)
	f.float(schema.FieldSMOccupancy, w.SMOccupancy)
	f.float(schema.FieldTempC, w.TempC)
	f.float(schema.FieldTensorActive, w.TensorActive)
	f.int(schema.FieldThrottle, w.Throttle)
	f.float(schema.FieldUtil, w.Util)
	f.float(schema.FieldUtilMax, w.UtilMax)
	f.float(schema.FieldWindowS, window.Some(w.Length.Seconds()))
	return f
}

// TagMap returns p's tags by key, empty ones included.
func (p Point) TagMap() map[string]string {
	m := make(map[string]string, len(p.Tags))
	for _, t := range p.Tags {
		m[t.Key] = t.Value
	}
	return m
}

// FieldMap returns p's fields by key.
func (p Point) FieldMap() map[string]any {
	m := make(map[string]any, len(p.Fields))
	for _, f := range p.Fields {
		m[f.Key] = f.Value
	}
	return m
}
