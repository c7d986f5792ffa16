package report

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/influxql"
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

// failing answers the GPU time query with an error and holds every
// other query until its context ends (or, were it never cancelled, 10 s).
type failing struct {
	mu       sync.Mutex
	uncalled int // queries that ended without being cancelled
}

func (f *failing) Query(ctx context.Context, q string) ([]influxql.Series, error) {
	switch {
	case strings.Contains(q, "last("):
		return nil, nil // no rollups
	case strings.Contains(q, `mean("util")`) && !strings.Contains(q, "GROUP BY time"):
		return nil, errors.New("boom")
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(10 * time.Second):
		f.mu.Lock()
		f.uncalled++
		f.mu.Unlock()
		return nil, errors.New("not cancelled")
	}
}

// TestFirstErrorEndsTheReport: one query's error is the report's, and
// the queries in flight with it are cancelled, not waited out.
func TestFirstErrorEndsTheReport(t *testing.T) {
	q := &failing{}
	day := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	_, err := Build(context.Background(), q, Filter{From: day, To: day.Add(24 * time.Hour), Interval: 10 * time.Minute, Level: Raw}, Options{})
	if err == nil || !strings.Contains(err.Error(), "gpu_time: boom") {
		t.Fatalf("error %v, want gpu_time's boom", err)
	}
	if q.uncalled > 0 {
		t.Errorf("%d queries ran on after the error", q.uncalled)
	}
}
