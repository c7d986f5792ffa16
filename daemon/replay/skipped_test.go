package replay

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestSkippedLinesWarned: the lines replay cannot read are in its warnings
// as the daemon logs them, with the reasons counted and the first line
// (testdata/skipped_lines.log: real lines, see daemon/agent's test).
func TestSkippedLinesWarned(t *testing.T) {
	o := Options{Engine: "auto", Year: 2025, Window: 10 * time.Second, Server: "s", Host: "h", TZ: "UTC",
		LogFile: "testdata/skipped_lines.log"}
	var out closed
	var warn bytes.Buffer
	if err := Run(context.Background(), o, &out, &warn); err != nil {
		t.Fatal(err)
	}
	w := warn.String()
	for _, want := range []string{"3 lines looked like throughput lines but were not read (unparsed 2, padded 1)",
		`a vllm line tpsmon cannot read (unparsed), counted and skipped: "INFO 07-03 23:23:42 [metrics.py:536]`} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
}
