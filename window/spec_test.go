package window

import (
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// TestLogSpeculationTallies: a log's speculation tallies add up, per
// window, into the drafted and accepted counts (built, no total), and
// alone they are no log coverage: a window with a tally but no line that
// spoke for time is down, as without it.
func TestLogSpeculationTallies(t *testing.T) {
	start := time.Date(2026, 5, 8, 16, 25, 0, 0, time.UTC)
	j := New(Config{Window: 10 * time.Second, MaxGap: 30 * time.Second, Start: start}, []Server{{Name: "s"}})
	stat := sample.Unknown(start.Add(time.Second), start.Add(9*time.Second))
	stat.Tokens = 600
	j.AddLog("s", stat)
	for _, tally := range [][2]float64{{1572, 489}, {1590, 455}} {
		iv := sample.Unknown(start.Add(9*time.Second), start.Add(9*time.Second))
		iv.SpecDrafted, iv.SpecAccepted = tally[0], tally[1]
		j.AddLog("s", iv)
	}
	lone := sample.Unknown(start.Add(35*time.Second), start.Add(35*time.Second))
	lone.SpecDrafted, lone.SpecAccepted = 100, 50
	j.AddLog("s", lone)
	cs := j.Flush(start.Add(time.Minute))
	if len(cs) < 4 {
		t.Fatalf("%d windows", len(cs))
	}
	w := cs[0].Servers[0]
	d, a := w.Counts[sample.SpecDraftTokens], w.Counts[sample.SpecAccepted]
	if !d.OK || !a.OK || d.Delta != 3162 || a.Delta != 944 || !d.Derived || d.Int() != 3162 || a.Int() != 944 {
		t.Errorf("drafted %+v, accepted %+v; want 3162 and 944, built", d, a)
	}
	if w.Source != "log" || !w.ExactTokens.OK || w.ExactTokens.V != 600 {
		t.Errorf("the stat line's window: source %q tokens %v", w.Source, w.ExactTokens)
	}
	if l := cs[3].Servers[0]; !l.Down || l.Counts[sample.SpecDraftTokens].OK {
		t.Errorf("a window with only a tally: down %v, drafted %+v", l.Down, l.Counts[sample.SpecDraftTokens])
	}
}
