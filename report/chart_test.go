package report

import (
	"fmt"
	"testing"
	"time"
)

func TestAxisNumbers(t *testing.T) {
	for _, tc := range []struct {
		hi   float64
		want string
	}{
		{37, "[0 10 20 30 40]"},
		{0.08, "[0 0.02 0.04 0.06 0.08]"},
		{2.53e6, "[0 1e+06 2e+06 3e+06]"},
		{0, "[0 0.25 0.5 0.75 1]"},
	} {
		if got := fmt.Sprint(niceTicks(tc.hi, 4)); got != tc.want {
			t.Errorf("ticks to %v: %s, want %s", tc.hi, got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    float64
		want string
	}{{1234567.891, "1,234,567.89"}, {86400, "86,400.00"}, {0.5, "0.50"}, {-1000, "-1,000.00"}} {
		if got := money(&tc.v); got != tc.want {
			t.Errorf("money(%v) = %s, want %s", tc.v, got, tc.want)
		}
	}
	for _, tc := range []struct {
		v    float64
		want string
	}{{40000, "40k"}, {2.5e6, "2.5M"}, {1.25, "1.25"}, {72.38e9, "72.38G"}, {0.004, "0.004"}} {
		if got := short(tc.v); got != tc.want {
			t.Errorf("short(%v) = %s, want %s", tc.v, got, tc.want)
		}
	}
	if got := timeLayout(10 * time.Minute); got != "15:04:05" {
		t.Errorf("10-minute ticks %q", got)
	}
}
