package config

import (
	"testing"
	"time"
)

// The sample configuration that packaging ships must load as it is.
func TestShippedSampleConfigLoads(t *testing.T) {
	cfg, err := Load("../../packaging/tpsmon.yaml", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Window != 10*time.Second || cfg.GPU.Backend != "nvml" || cfg.Sink.Spool.MaxBytes != 1<<30 ||
		cfg.Sink.Spool.QuarantineMaxBytes != 64<<20 {
		t.Errorf("sample config: %+v", cfg)
	}
}
