package analysis

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/window"
)

func TestCeilingOfAWindow(t *testing.T) {
	h100, _ := roofline.Lookup("H100 SXM")
	pcie, _ := roofline.Lookup("H100 PCIe")
	gpus := map[string]roofline.Spec{"0": h100, "1": h100, "2": pcie}
	srv := roofline.Server{Model: roofline.Model{Params: 70e9, BytesPerWeight: 2}}
	w := window.ServerWindow{Server: "llm", GPUs: []string{"0", "1"}, Running: window.Some(8.0), SystemTPS: window.Some(400.0)}
	mbu, ceil := Ceiling(w, srv, gpus)
	// TP 2 of the window's two GPUs: 70 GB a GPU a step, 50 steps/s.
	if !mbu.OK || math.Abs(mbu.V-70e9*50/3350e9) > 1e-9 || math.Abs(ceil.V-8*3350e9/70e9) > 1e-6 {
		t.Fatalf("mbu %+v ceiling %+v", mbu, ceil)
	}
	// A PCIe part among them: the slowest sets the step.
	w.GPUs = []string{"0", "2"}
	if mbu, _ := Ceiling(w, srv, gpus); math.Abs(mbu.V-70e9*50/2000e9) > 1e-9 {
		t.Errorf("slowest GPU: %+v", mbu)
	}
	// Absent: a GPU without a peak, no GPUs and none configured, nothing running.
	for name, c := range map[string]struct {
		w window.ServerWindow
	}{
		"unknown gpu": {window.ServerWindow{GPUs: []string{"7"}, Running: window.Some(1.0), SystemTPS: window.Some(10.0)}},
		"no gpus":     {window.ServerWindow{Running: window.Some(1.0), SystemTPS: window.Some(10.0)}},
		"idle":        {window.ServerWindow{GPUs: []string{"0"}, Running: window.Some(0.0), SystemTPS: window.Some(0.0)}},
		"no running":  {window.ServerWindow{GPUs: []string{"0"}, SystemTPS: window.Some(10.0)}},
	} {
		if mbu, ceil := Ceiling(c.w, srv, gpus); mbu.OK || ceil.OK {
			t.Errorf("%s: %+v %+v", name, mbu, ceil)
		}
	}
	// A configured peak needs no GPU (a CPU server).
	cpu := srv
	cpu.GPU = roofline.GPU{PeakBWGBps: 20}
	if mbu, _ := Ceiling(window.ServerWindow{Running: window.Some(1.0), SystemTPS: window.Some(0.1)}, cpu, nil); !mbu.OK {
		t.Error("configured peak: no MBU")
	}
}

// Analyze writes the ceiling for servers with facts and leaves the others
// without it.
func TestAnalyzeCeilingOnlyWithFacts(t *testing.T) {
	h100, _ := roofline.Lookup("H100 SXM")
	srv := &roofline.Server{Model: roofline.Model{Params: 8e9, BytesPerWeight: 2}}
	ws := []window.ServerWindow{
		{Server: "with", GPUs: []string{"0"}, Running: window.Some(2.0), SystemTPS: window.Some(100.0)},
		{Server: "without", GPUs: []string{"0"}, Running: window.Some(2.0), SystemTPS: window.Some(100.0)},
	}
	cs := Analyze([]window.Closed{{Start: time.Unix(0, 0), Servers: ws}},
		&Facts{Servers: map[string]ServerFacts{"with": {Roofline: srv}}, GPUs: map[string]roofline.Spec{"0": h100}})
	if s := cs[0].Servers; !s[0].MBU.OK || !s[0].CeilingTPS.OK || s[1].MBU.OK || s[1].CeilingTPS.OK {
		t.Errorf("%+v", s)
	}
}

// Each finding's bound, from both sides, at the default thresholds.
func TestFindingBounds(t *testing.T) {
	th := DefaultThresholds
	w := func(running, waiting float64) window.ServerWindow {
		return window.ServerWindow{Running: window.Some(running), Waiting: window.Some(waiting)}
	}
	none := window.Opt[string]{}
	cases := []struct {
		name string
		w    window.ServerWindow
		mbu  window.Opt[float64]
		want window.Opt[string]
	}{
		{"at near_mbu", w(8, 0), window.Some(th.NearMBU), window.Some(FindingNearCeiling)},
		{"just under near_mbu, many running", w(8, 0), window.Some(th.NearMBU - 0.01), none},
		{"near the ceiling with few running", w(1, 0), window.Some(0.9), window.Some(FindingNearCeiling)},
		{"few running, none waiting", w(th.FewRunning, 0), window.Some(0.5), window.Some(FindingDemandBound)},
		{"just over few running", w(th.FewRunning+0.1, 0), window.Some(0.5), none},
		{"few running but waiting", w(1, th.Waiting), window.Some(0.5), none},
		{"few running, waiting under the bound", w(1, th.Waiting-0.1), window.Some(0.5), window.Some(FindingDemandBound)},
		{"many running, under low_mbu", w(8, 3), window.Some(th.LowMBU - 0.01), window.Some(FindingHostBound)},
		{"many running, at low_mbu", w(8, 3), window.Some(th.LowMBU), none},
		{"host bound needs more than few running", w(th.FewRunning, 3), window.Some(0.1), none},
		{"no mbu", w(8, 0), window.Opt[float64]{}, none},
	}
	for _, c := range cases {
		if got := Finding(c.w, c.mbu, th); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestFindingThresholdsValidated(t *testing.T) {
	for name, th := range map[string]Thresholds{
		"near above 1":  func() Thresholds { th := DefaultThresholds; th.NearMBU = 1.5; return th }(),
		"low over near": func() Thresholds { th := DefaultThresholds; th.LowMBU = 0.8; return th }(),
		"few negative":  func() Thresholds { th := DefaultThresholds; th.FewRunning = -1; return th }(),
		"low zero":      func() Thresholds { th := DefaultThresholds; th.LowMBU = 0; return th }(),
	} {
		if err := th.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := DefaultThresholds.Validate(); err != nil {
		t.Error(err)
	}
}

// The sanity layer's above_ceiling rule reads the ceiling the analysis
// derives: a rate 20 % over it is suspect, one under it is not.
func TestAboveCeilingUsesTheCeiling(t *testing.T) {
	h100, _ := roofline.Lookup("H100 SXM")
	f := &Facts{Servers: map[string]ServerFacts{"s": {Roofline: &roofline.Server{Model: roofline.Model{Params: 8e9, BytesPerWeight: 2}}}},
		GPUs: map[string]roofline.Spec{"0": h100}}
	ceiling := 3350e9 / 16e9 // tokens/s at batch 1
	for _, c := range []struct {
		tps     float64
		suspect bool
	}{{ceiling * 1.2, true}, {ceiling * 0.9, false}} {
		w := window.ServerWindow{Server: "s", GPUs: []string{"0"}, Running: window.Some(1.0), SystemTPS: window.Some(c.tps)}
		a := analyzeServer(w, DefaultThresholds, f, nil)
		got := a.Suspect.OK && strings.Contains(a.Suspect.V, RuleAboveCeiling)
		if got != c.suspect || !a.CeilingTPS.OK {
			t.Errorf("%.0f tokens/s against %.0f: suspect %+v, ceiling %+v", c.tps, ceiling, a.Suspect, a.CeilingTPS)
		}
	}
}
