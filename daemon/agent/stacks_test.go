package agent

import (
	"strings"
	"testing"
)

func TestOurStacksNamesOurFramesOnly(t *testing.T) {
	s := ourStacks()
	// This test's own goroutine is in package main of tpsmon.
	if !strings.Contains(s, "TestOurStacksNamesOurFramesOnly") || !strings.Contains(s, "stacks_test.go") {
		t.Fatalf("stacks %q do not show this test", s)
	}
	if strings.Contains(s, "runtime.") || strings.Contains(s, "testing.") {
		t.Errorf("stacks %q show frames outside tpsmon", s)
	}
	if n := strings.Count(s, "\n"); n != 0 {
		t.Errorf("stacks span %d lines; want one", n+1)
	}
}
