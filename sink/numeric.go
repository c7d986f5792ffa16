package sink

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
)

// Profile is how the window points' fields are written
// (sink.influx.profile).
type Profile string

const (
	// ProfileInflux writes the fields as they are, strings included: the
	// default, what report, rollups and dashboard read.
	ProfileInflux Profile = "influx"
	// ProfileNumeric writes every string field as numbers that keep its
	// meaning (schema.FieldStateCode and its neighbours), for
	// Prometheus-model stores that take line protocol but lose strings.
	ProfileNumeric Profile = "numeric"
)

// Profiles lists the profiles.
var Profiles = []Profile{ProfileInflux, ProfileNumeric}

// ParseProfile returns the profile named s; "" is the default.
func ParseProfile(s string) (Profile, error) {
	if s == "" {
		return ProfileInflux, nil
	}
	if p := Profile(s); slices.Contains(Profiles, p) {
		return p, nil
	}
	return "", fmt.Errorf("profile %q: unknown (one of %s, %s)", s, ProfileInflux, ProfileNumeric)
}

// numericOf turns the value of each string field into the numeric
// profile's fields, appended to f; a value without a code is an error,
// never a number that means something else. TestNumericCoversStrings
// fails on a string field a window writes that has no entry here.
var numericOf = map[string]func(f *fields, v string) error{
	schema.FieldState: func(f *fields, v string) error {
		code, ok := schema.StateCodes[v]
		if !ok {
			return fmt.Errorf("state %q has no state_code", v)
		}
		f.code(schema.FieldStateCode, code)
		for _, s := range schema.States {
			f.flag(schema.NumericField(schema.FieldState, s), s == v)
		}
		return nil
	},
	schema.FieldSource:         coded(schema.FieldSourceCode, schema.SourceCodes),
	schema.FieldEnergySource:   coded(schema.FieldEnergySourceCode, schema.EnergySourceCodes),
	schema.FieldSpecFinding:    coded(schema.FieldSpecFindingCode, schema.SpecFindingCodes),
	schema.FieldCeilingFinding: coded(schema.FieldCeilingFindingCode, schema.CeilingFindingCodes),
	schema.FieldLatencySource:  coded(schema.FieldLatencySourceCode, schema.LatencySourceCodes),
	schema.FieldSLOMissPhase:   coded(schema.FieldSLOMissPhaseCode, schema.SLOMissPhaseCodes),
	schema.FieldTTFTBasis:      coded(schema.FieldTTFTBasisCode, schema.TTFTBasisCodes),
	// Free text: that there is one is what a number can keep.
	schema.FieldError:         flagged(schema.FieldErrorCode),
	schema.FieldLatencyReason: flagged(schema.FieldLatencyReasonCode),
	schema.FieldSuspect: func(f *fields, v string) error {
		fired := strings.Split(v, ",")
		for _, r := range fired {
			if !slices.Contains(analysis.Rules, r) {
				return fmt.Errorf("suspect rule %q is unknown", r)
			}
		}
		for _, r := range analysis.Rules {
			f.flag(schema.NumericField(schema.FieldSuspect, r), slices.Contains(fired, r))
		}
		return nil
	},
}

// flagged writes 1 under key for a free-text field.
func flagged(key string) func(*fields, string) error {
	return func(f *fields, _ string) error {
		f.code(key, 1)
		return nil
	}
}

// coded maps a string field's values to one code field by table.
func coded(key string, codes map[string]int64) func(*fields, string) error {
	return func(f *fields, v string) error {
		code, ok := codes[v]
		if !ok {
			return fmt.Errorf("%s: value %q has no code", key, v)
		}
		f.code(key, code)
		return nil
	}
}

func (f *fields) code(k string, v int64) { *f = append(*f, typed{key: k, kind: 'i', i: v}) }

func (f *fields) flag(k string, on bool) {
	var v int64
	if on {
		v = 1
	}
	f.code(k, v)
}

// numeric appends src's fields to dst with every string field replaced by
// its numeric fields, sorted by key.
func numeric(dst, src fields) (fields, error) {
	for _, t := range src {
		if t.kind != 's' {
			dst = append(dst, t)
			continue
		}
		conv, ok := numericOf[t.key]
		if !ok {
			return dst, fmt.Errorf("field %s: a string with no numeric form", t.key)
		}
		if err := conv(&dst, t.s); err != nil {
			return dst, fmt.Errorf("field %s: %w", t.key, err)
		}
	}
	slices.SortFunc(dst, func(a, b typed) int { return cmp.Compare(a.key, b.key) })
	return dst, nil
}

// NumericServerFields returns the fields of a server's window in the
// numeric profile, sorted by key.
func NumericServerFields(w analysis.ServerWindow) ([]Field, error) {
	f, err := numeric(nil, serverFields(nil, w))
	return f.boxed(), err
}

// NumericGPUFields returns the fields of a GPU's window in the numeric
// profile, sorted by key.
func NumericGPUFields(w analysis.GPUWindow) ([]Field, error) {
	f, err := numeric(nil, gpuFields(nil, w))
	return f.boxed(), err
}

// ServerTags and GPUTags return the tags of a window's point, sorted by
// key, as ServerPoint and GPUPoint carry them.
func ServerTags(w analysis.ServerWindow) []Tag { return serverTags(nil, w) }

// GPUTags: see ServerTags.
func GPUTags(w analysis.GPUWindow) []Tag { return gpuTags(nil, w) }
