package main

import (
	"os"
	"testing"

	"github.com/tpsmon/tpsmon/internal/tpsmonbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	tpsmonbin.Remove()
	os.Exit(code)
}
