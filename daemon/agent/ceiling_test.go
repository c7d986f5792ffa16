package agent

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/window"
)

type capture struct{ got []analysis.Closed }

func (c *capture) WriteWindows(cs []analysis.Closed) error {
	c.got = append(c.got, cs...)
	return nil
}

// The pipeline hands the analysis its servers' model facts (read at
// start) and the GPUs' peaks (told when the backend opens): a server with
// a model file gets mbu and ceiling_tps on its GPU's peak, one without is
// said once and gets neither.
func TestPipelineGivesTheCeilingItsFacts(t *testing.T) {
	var logs bytes.Buffer
	cfg := configtest.Private(t)
	cfg.Servers = []config.ServerConfig{
		{Name: "with", ModelFile: filepath.Join("..", "..", "analysis", "modelfile", "testdata", "tiny-q4.gguf")},
		{Name: "without"},
	}
	out := &capture{}
	p := testLoop(&pipeline{log: slog.New(slog.NewTextHandler(&logs, nil)), outputs: []WindowWriter{out}}, cfg, nil)
	p.setServerFacts(cfg)
	devicesMsg{{Index: 0, Name: "NVIDIA H100 80GB HBM3", MemBusWidthBits: 5120, MaxMemClockMHz: 2619}}.apply(p)
	w := func(name string) window.ServerWindow {
		return window.ServerWindow{Server: name, GPUs: []string{"0"}, Running: window.Some(2.0), SystemTPS: window.Some(100.0)}
	}
	p.emit([]window.Closed{{Start: time.Unix(1000, 0), Servers: []window.ServerWindow{w("with"), w("without")}}})
	if len(out.got) != 1 {
		t.Fatalf("%d windows", len(out.got))
	}
	s := out.got[0].Servers
	if !s[0].MBU.OK || !s[0].CeilingTPS.OK || s[0].MBU.V <= 0 || s[1].MBU.OK || s[1].CeilingTPS.OK {
		t.Errorf("with: %+v %+v; without: %+v %+v", s[0].MBU, s[0].CeilingTPS, s[1].MBU, s[1].CeilingTPS)
	}
	if n := strings.Count(logs.String(), "no decode ceiling"); n != 1 || !strings.Contains(logs.String(), "server=without") {
		t.Errorf("the server without facts said %d times:\n%s", n, logs.String())
	}
}
