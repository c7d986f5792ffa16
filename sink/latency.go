package sink

import (
	"cmp"
	"math"
	"slices"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/schema"
)

// latencyFields appends a server window's latency fields to f, in the
// order of their keys; none when the window said nothing of latency.
func latencyFields(f fields, w analysis.ServerWindow) fields {
	s := w.Latency
	if s.Source == "" {
		return f
	}
	start := len(f)
	// Every latency value is 0 or more; negative is unknown.
	num := func(k string, v float64) {
		if v >= 0 && !math.IsInf(v, 0) {
			f = append(f, typed{key: k, kind: 'f', f: v})
		}
	}
	str := func(k, v string) {
		if v != "" {
			f = append(f, typed{key: k, kind: 's', s: v})
		}
	}
	str(schema.FieldLatencySource, s.Source)
	str(schema.FieldLatencyReason, s.Reason)
	str(schema.FieldTTFTBasis, s.TTFTBasis)
	qs := []latency.Quantile{s.TTFT[0], s.TTFT[1], s.TTFT[2], s.ITL[0], s.ITL[1], s.ITL[2], s.E2E[0], s.E2E[1],
		s.Queue[0], s.Queue[1], s.PerUserTPS[0], s.PerUserTPS[1]}
	for i, name := range schema.LatencyQuantileFields {
		q := qs[i]
		if q.OK {
			num(name, q.Value)
		}
		if q.Bounded && s.Source == latency.SourceHistogram {
			num(schema.LoField(name), q.Lo)
			num(schema.HiField(name), q.Hi)
		}
	}
	if a := s.Attainment; a.OK {
		if a.Exact {
			num(schema.FieldSLOAttainment, a.Lo)
		}
		num(schema.FieldSLOAttainmentLo, a.Lo)
		num(schema.FieldSLOAttainmentHi, a.Hi)
		num(schema.FieldSLORequests, a.Requests)
		if s.GoodputRPSLo == s.GoodputRPSHi {
			num(schema.FieldGoodputRPS, s.GoodputRPSLo)
		}
		num(schema.FieldGoodputRPSLo, s.GoodputRPSLo)
		num(schema.FieldGoodputRPSHi, s.GoodputRPSHi)
		if s.GoodputTPSLo == s.GoodputTPSHi {
			num(schema.FieldGoodputTPS, s.GoodputTPSLo)
		}
	}
	str(schema.FieldSLOMissPhase, w.SLOMiss)
	lat := f[start:]
	slices.SortFunc(lat, func(a, b typed) int { return cmp.Compare(a.key, b.key) })
	return f
}

// mergeFields merges two lists of fields, each in the order of their
// keys, into one.
func mergeFields(a, b fields) fields {
	if len(b) == 0 {
		return a
	}
	out := make(fields, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i].key < b[j].key {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return append(append(out, a[i:]...), b[j:]...)
}
