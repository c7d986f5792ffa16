package window

import (
	"testing"

	"github.com/tpsmon/tpsmon/sample"
)

// TestCountsAndDoubtedCounters: a scraped window carries each counter's
// delta, rate and total and each gauge's mean for the analysis, marks
// counters the collector built, and says when the Guard doubted the
// server's counters, in that window only.
func TestCountsAndDoubtedCounters(t *testing.T) {
	j := newJoiner(0)
	add := func(sec, cached float64, suspect bool) {
		s := sample.Server{Time: at(sec)}
		s.SetCounter(sample.GenerationTokens, 100*sec)
		s.Derived[sample.GenerationTokens] = true
		s.SetCounter(sample.PromptCached, cached)
		s.SetGauge(sample.WaitingDeferred, 3)
		s.Suspect = suspect
		j.AddServer("llm", s)
	}
	for sec := 0.0; sec < 20; sec++ {
		add(sec, 10*sec, sec == 13)
	}
	ws := servers(j.Flush(at(40)))
	if len(ws) < 2 {
		t.Fatalf("%d windows", len(ws))
	}
	w0, w1 := ws[0], ws[1]
	c := w0.Counts[sample.PromptCached]
	if !c.OK || c.Delta != 100 || c.Total != 100 || !c.RateOK || c.Rate != 10 || c.Derived {
		t.Errorf("cached count %+v, want delta 100 to total 100 at 10/s, read", c)
	}
	if !w0.Counts[sample.GenerationTokens].Derived {
		t.Error("the built token counter is not marked derived")
	}
	if w0.Counts[sample.PromptExternal].OK {
		t.Errorf("a counter never read: %+v", w0.Counts[sample.PromptExternal])
	}
	if w0.Gauges[sample.WaitingDeferred] != Some(3.0) || w0.Gauges[sample.Awake].OK {
		t.Errorf("gauges %v / %v, want 3 and absent", w0.Gauges[sample.WaitingDeferred], w0.Gauges[sample.Awake])
	}
	if w0.CountersDoubted || !w1.CountersDoubted {
		t.Errorf("doubted %v, %v: want only the window of the suspect sample", w0.CountersDoubted, w1.CountersDoubted)
	}
}
