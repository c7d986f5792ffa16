package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// TestEmitAnalysesWithConfiguredThresholds: the outputs get the windows
// analysed, their state the verdict under the configuration's thresholds.
func TestEmitAnalysesWithConfiguredThresholds(t *testing.T) {
	// Tokens flow, nothing waits, the GPU is 50 % busy.
	w := window.ServerWindow{Server: "m", Tokens: window.Some[int64](100), ExactTokens: window.Some(100.0),
		Running: window.Some(4.0), Waiting: window.Some(0.0), GPUUtil: window.Some(50.0)}
	for _, tc := range []struct {
		name      string
		underUtil float64
		want      string
	}{
		{"default under_util (40)", 0, schema.StateOK},
		{"under_util 60", 60, schema.StateUnderutilized},
	} {
		cfg := configtest.Private(t)
		if tc.underUtil != 0 {
			cfg.Thresholds.UnderUtil = tc.underUtil
		}
		out := &recorder{}
		l := testLoop(&pipeline{log: slog.New(slog.DiscardHandler), outputs: []WindowWriter{out}}, cfg, nil)
		l.emit([]window.Closed{{Start: time.Unix(1000, 0), Servers: []window.ServerWindow{w}}})
		if len(out.cs) != 1 || len(out.cs[0].Servers) != 1 || out.cs[0].Servers[0].State != tc.want ||
			out.cs[0].Servers[0].Tokens != w.Tokens {
			t.Errorf("%s: outputs got %+v, want one window of state %s", tc.name, out.cs, tc.want)
		}
	}
}
