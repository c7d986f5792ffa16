package agent

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// A GPU reading no GPU gives (a driver glitch) is dropped before the
// joiner sees it and counted on /metrics by GPU and reason; the rest of the
// reading, and the other GPUs, are joined.
func TestImpossibleGPUReadingsAreCounted(t *testing.T) {
	m := newMetrics()
	reg := prometheus.NewRegistry()
	m.register(reg)
	at := time.Date(2026, 5, 19, 10, 0, 1, 0, time.UTC)
	j := window.New(window.Config{Window: 10 * time.Second, MaxGap: 3 * time.Second, Host: "h", Start: at}, nil)
	l := testLoop(&pipeline{log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: m}, nil, j)
	sample := func(index int, instance string, util, power float64) sample.GPU {
		return sample.GPU{Time: at, Index: index, Instance: instance, UUID: "GPU-" + instance + string(rune('0'+index)),
			UtilPct: util, PowerW: power, Has: sample.FieldUtil | sample.FieldPower}
	}
	gpuMsg{sample(0, "", 50, math.Inf(1)), sample(1, "gi1", 900, 300), sample(2, "", 40, 250)}.apply(l)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "tpsmon_gpu_samples_discarded_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got = append(got, fmt.Sprintf("%s %v", strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	slices.Sort(got)
	if want := []string{"gpu=0,reason=inf 1", "gpu=1/gi1,reason=huge 1"}; !slices.Equal(got, want) {
		t.Errorf("tpsmon_gpu_samples_discarded_total %q, want %q", got, want)
	}
	cs := j.Close(at.Add(9 * time.Second)) // the window of 10:00:00
	if len(cs) != 1 || len(cs[0].GPUs) != 3 {
		t.Fatalf("%d windows, want one of three GPUs", len(cs))
	}
	for _, g := range cs[0].GPUs {
		switch g.UUID {
		case "GPU-0": // its power dropped, its utilization kept
			if g.PowerW.OK || !g.Util.OK || g.Util.V != 50 {
				t.Errorf("GPU 0: power %+v util %+v; want no power, util 50", g.PowerW, g.Util)
			}
		case "GPU-gi11":
			if g.Util.OK || !g.PowerW.OK || g.PowerW.V != 300 {
				t.Errorf("GPU 1: util %+v power %+v; want no util, 300 W", g.Util, g.PowerW)
			}
		case "GPU-2":
			if !g.Util.OK || !g.PowerW.OK {
				t.Errorf("GPU 2 lost a reading: %+v", g)
			}
		}
	}
}
