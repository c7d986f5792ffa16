package analysis

import (
	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/window"
)

// Ceiling returns a server window's MBU and system ceiling (package
// roofline) on server s, whose GPU, when not given, is the slowest of the
// window's GPUs in gpus and whose TP, when 0, is their number. Both are
// absent when the window decoded nothing or a fact is missing (a GPU
// whose peak is unknown).
func Ceiling(w window.ServerWindow, s roofline.Server, gpus map[string]roofline.Spec) (mbu, ceiling window.Opt[float64]) {
	if !w.Running.OK || !w.SystemTPS.OK {
		return mbu, ceiling
	}
	bpw := s.Model.BytesPerWeight
	if s.Model.WeightBytes > 0 {
		bpw = s.Model.WeightBytes / s.Model.Params
	}
	if s.GPU.PeakBWGBps == 0 {
		if len(w.GPUs) == 0 {
			return mbu, ceiling
		}
		for i, l := range w.GPUs {
			sp, ok := gpus[l]
			if !ok || sp.BWGBps <= 0 {
				return mbu, ceiling
			}
			if g := sp.GPU(bpw); i == 0 || g.PeakBWGBps < s.GPU.PeakBWGBps {
				s.GPU = g
			}
		}
	}
	if s.TP == 0 {
		s.TP = max(1, len(w.GPUs))
	}
	in := roofline.Window{Running: w.Running.V, SystemTPS: w.SystemTPS.V, KVUsage: -1, StepsPerS: -1}
	if w.KVCacheUsage.OK {
		in.KVUsage = w.KVCacheUsage.V
	}
	if w.DecodeStepsPerS.OK {
		in.StepsPerS = w.DecodeStepsPerS.V
	}
	l, ok := roofline.LiveWindow(s, in)
	if !ok {
		return mbu, ceiling
	}
	return window.Some(l.MBU), window.Some(l.CeilingTPS)
}

// Findings of the decode ceiling (schema.FieldCeilingFinding).
const (
	// FindingNearCeiling: the steps read near the peak bandwidth; more
	// tokens need more GPUs or a larger batch.
	FindingNearCeiling = "near_ceiling"
	// FindingDemandBound: few requests run and none wait; the hardware
	// could serve more of them at almost the same step time.
	FindingDemandBound = "demand_bound"
	// FindingHostBound: many requests run yet the steps read far below
	// the peak: the host, the scheduler or kernel launches hold the GPU
	// back.
	FindingHostBound = "host_bound"
)

// Finding is what a window's MBU says (one of the Finding constants), or
// absent without an MBU or where none applies.
func Finding(w window.ServerWindow, mbu window.Opt[float64], th Thresholds) window.Opt[string] {
	if !mbu.OK || !w.Running.OK {
		return window.Opt[string]{}
	}
	waiting := w.Waiting.OK && w.Waiting.V >= th.Waiting
	switch {
	case mbu.V >= th.NearMBU:
		return window.Some(FindingNearCeiling)
	case w.Running.V <= th.FewRunning && !waiting:
		return window.Some(FindingDemandBound)
	case w.Running.V > th.FewRunning && mbu.V < th.LowMBU:
		return window.Some(FindingHostBound)
	}
	return window.Opt[string]{}
}
