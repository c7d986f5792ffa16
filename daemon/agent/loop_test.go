package agent

import (
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/window"
)

// testLoop is the main loop's state as run sets it up, for tests that
// apply messages or write windows without running the loop: p's missing
// parts are filled as New would (health, metrics, clock).
func testLoop(p *pipeline, cfg *config.Config, j *window.Joiner) *loop {
	if p.health == nil {
		p.health = &health{}
	}
	if p.metrics == nil {
		p.metrics = newMetrics()
	}
	if p.now == nil {
		p.now = time.Now
	}
	return &loop{pipeline: p, cfg: cfg, j: j, down: map[string]bool{}, logPos: map[string]tail.Position{},
		logDirty: map[string]bool{}, gpuErr: map[string]bool{}, suspect: map[string]bool{}, placed: map[string][]string{}}
}
