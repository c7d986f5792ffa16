package sample

import (
	"math"
	"testing"
	"time"
)

// TestCheckIntervalFastPathAgrees runs CheckInterval's quick accept over
// edge values of every field and of the interval's ends, and wants the
// verdict the full checks (intervalDiscard) give.
func TestCheckIntervalFastPathAgrees(t *testing.T) {
	values := []float64{-1, 0, math.Copysign(0, -1), 0.5, 1, 1.0000001, 1e6, 1e6 + 1, 1e7, 1e7 + 1, 3e7, 1e300,
		-0.5, -2, math.NaN(), math.Inf(1), math.Inf(-1)}
	base := time.Date(2026, 5, 19, 10, 0, 0, 0, time.UTC)
	spans := []struct{ start, end time.Time }{
		{base, base},
		{base.Add(-3 * time.Second), base},
		{base.Add(-MaxIntervalSpan), base},
		{base.Add(-MaxIntervalSpan - time.Nanosecond), base},
		{base.Add(time.Second), base}, // ends before it starts
		{MinTime, MinTime.Add(time.Second)},
		{MinTime.Add(-time.Nanosecond), MinTime},
		{MaxTime.Add(-time.Second), MaxTime},
		{MaxTime, MaxTime.Add(time.Nanosecond)},
		{time.Time{}, base},
	}
	fields := []func(*Interval) *float64{
		func(iv *Interval) *float64 { return &iv.Tokens },
		func(iv *Interval) *float64 { return &iv.PromptTokens },
		func(iv *Interval) *float64 { return &iv.UserTokens },
		func(iv *Interval) *float64 { return &iv.UserSeconds },
		func(iv *Interval) *float64 { return &iv.Preemptions },
		func(iv *Interval) *float64 { return &iv.Running },
		func(iv *Interval) *float64 { return &iv.Waiting },
		func(iv *Interval) *float64 { return &iv.KV },
		func(iv *Interval) *float64 { return &iv.Held },
	}
	checked, refused := 0, 0
	for _, sp := range spans {
		secs := max(sp.end.Sub(sp.start).Seconds(), 1)
		for fi, field := range fields {
			for _, v := range values {
				iv := Unknown(sp.start, sp.end)
				iv.Tokens = 10 // a known value beside the one varied
				*field(&iv) = v
				gotD, gotOK := CheckInterval(iv)
				wantD, wantOK := intervalDiscard(iv, secs, MaxTokensPerSecond*secs)
				if gotOK != wantOK || gotD != wantD {
					t.Errorf("span %v..%v field %d = %v: CheckInterval says %v %v, the full checks %v %v",
						sp.start, sp.end, fi, v, gotD, gotOK, wantD, wantOK)
				}
				checked++
				if !gotOK {
					refused++
				}
			}
		}
	}
	if refused == 0 || refused == checked {
		t.Fatalf("%d of %d refused: the cases do not test both verdicts", refused, checked)
	}
}

// TestHeldStart: a request counts in running from Held seconds before its
// end where that is before its start, else from its start.
func TestHeldStart(t *testing.T) {
	end := time.Date(2026, 12, 1, 20, 17, 0, 0, time.UTC)
	for _, tc := range []struct {
		held float64
		want time.Duration // before end
	}{
		{-1, 2 * time.Second},
		{0, 2 * time.Second},
		{1.5, 2 * time.Second},
		{2, 2 * time.Second},
		{2.25, 2250 * time.Millisecond},
		{0.013 + 2, 2013 * time.Millisecond},
	} {
		iv := Unknown(end.Add(-2*time.Second), end)
		iv.Held = tc.held
		if got := end.Sub(iv.HeldStart()); got != tc.want {
			t.Errorf("held %v s over a 2 s span: from %v before its end, want %v", tc.held, got, tc.want)
		}
	}
}
