package agent

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/sim/vllmsim"
)

func TestMalformedScrapesSkippedAndCounted(t *testing.T) {
	synctest.Test(t, malformedScrapes)
}

func malformedScrapes(t *testing.T) {
	src := &vllmsim.Driven{Rate: 100, Start: time.Now(), ResetAt: time.Now().Add(time.Hour), Malformed: 2}
	a, out := runOneServer(t, "flaky", src, 1600*time.Millisecond)
	if n := counted(a.metrics.malformed); n < 5 {
		t.Errorf("malformed scrapes counted %d, want about 15", n)
	}
	if n := strings.Count(out, "tpsmon_server,"); n < 3 {
		t.Errorf("only %d windows written despite good scrapes:\n%s", n, out)
	}
	if !strings.Contains(out, "system_tps=") {
		t.Errorf("no throughput measured between malformed pages:\n%s", out)
	}
}

// TestBinaryExitStatus builds tpsmon and checks what an operator sees.
