package report

import (
	"testing"
)

// TestRankKeyTiesRoundOff: sums of the same windows taken in another
// order tie; real differences, however small a share, do not.
func TestRankKeyTiesRoundOff(t *testing.T) {
	for _, tc := range []struct {
		a, b float64
		tie  bool
	}{
		{0.1 + 0.2, 0.3, true},
		{123.2 * (1 + 3e-15), 123.2, true},
		{-5e7 * (1 - 4e-15), -5e7, true},
		{123.2, 123.2001, false},
		{1e-12, 1.001e-12, false},
		{0, 1e-300, false},
		{538.13e6, 538.14e6, false},
	} {
		if got := rankKey(tc.a) == rankKey(tc.b); got != tc.tie {
			t.Errorf("rankKey(%v) == rankKey(%v): %v, want %v", tc.a, tc.b, got, tc.tie)
		}
	}
}

// TestLostRankingTiesFallToNames: two servers whose lost GPU-hours differ
// in their last digits rank by host, whichever sum came out larger.
func TestLostRankingTiesFallToNames(t *testing.T) {
	for _, first := range []float64{62.8 * (1 + 2e-15), 62.8} {
		second := 62.8*(1+2e-15) + 62.8 - first
		r := &Report{}
		r.Lost = []Lost{{Host: "node-b", LostGPUHours: &first, LostTokens: &first}, {Host: "node-a", LostGPUHours: &second, LostTokens: &second}}
		sortLost(r.Lost)
		if r.Lost[0].Host != "node-a" {
			t.Errorf("with %v against %v, %s ranks first", first, second, r.Lost[0].Host)
		}
	}
}
