package analysis

import (
	"math"
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
