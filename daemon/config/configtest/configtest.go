// Package configtest gives tests a daemon configuration of their own. It
// sits beside the package it serves, as net/http/httptest does: test
// support (testkit) imports nothing of the daemon.
package configtest

import (
	"testing"

	"github.com/tpsmon/tpsmon/daemon/config"
)

// Private is the default configuration with everything a test must not
// share with others (ports, directories, discovery of servers on this
// machine) made private.
func Private(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Load("", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Sink.Spool.Dir = t.TempDir()
	cfg.Discovery.Enabled = false
	return cfg
}
