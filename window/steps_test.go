package window

import (
	"testing"

	"github.com/tpsmon/tpsmon/sample"
)

// An engine's step counter (llama.cpp n_decode_total, TensorRT-LLM
// iterations) becomes the window's decode steps per second; a server
// counting none has none.
func TestDecodeStepsPerS(t *testing.T) {
	for _, c := range []sample.Counter{sample.Decodes, sample.Iterations} {
		j := newJoiner(0)
		for sec := 0.0; sec <= 20; sec++ {
			s := reading(scrape{t: sec, tokens: 200 * sec, running: 4})
			s.SetCounter(c, 1000+50*sec)
			j.AddServer("llm", s)
		}
		ws := servers(j.Flush(at(30)))
		if len(ws) != 2 {
			t.Fatalf("%v: %d windows", c, len(ws))
		}
		for _, w := range ws {
			if !w.DecodeStepsPerS.OK || w.DecodeStepsPerS.V != 50 {
				t.Errorf("%v: window %v: steps %+v, want 50/s", c, w.Start, w.DecodeStepsPerS)
			}
		}
	}
	ws := serverWindows(t, newJoiner(0), steady(0, 21, 1, 100, 0), 30)
	for _, w := range ws {
		if w.DecodeStepsPerS.OK {
			t.Errorf("no step counter, yet %+v", w.DecodeStepsPerS)
		}
	}
}
