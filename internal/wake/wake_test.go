package wake

import (
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	anchor := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		now  time.Duration // after anchor
		d    time.Duration
		want time.Duration // after anchor
	}{
		{"at the anchor: the next one, not now", 0, time.Second, time.Second},
		{"just after", time.Nanosecond, time.Second, time.Second},
		{"just before an instant", 3*time.Second - 1, time.Second, 3 * time.Second},
		{"on an instant", 3 * time.Second, time.Second, 4 * time.Second},
		{"5 s interval", 7 * time.Second, 5 * time.Second, 10 * time.Second},
		{"sub-second interval", 1234 * time.Millisecond, 250 * time.Millisecond, 1250 * time.Millisecond},
		{"interval not dividing a second", 1100 * time.Millisecond, 700 * time.Millisecond, 1400 * time.Millisecond},
		{"before the anchor", -1500 * time.Millisecond, time.Second, -time.Second},
		{"before the anchor, on an instant", -2 * time.Second, time.Second, -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := next(anchor, anchor.Add(tc.now), tc.d).Sub(anchor)
			if got != tc.want {
				t.Errorf("next(anchor+%v, %v) = anchor+%v, want anchor+%v", tc.now, tc.d, got, tc.want)
			}
		})
	}
}

// TestAnchorIsAWholeSecond: loops of 1 s and its divisors tick on whole
// seconds of wall time, where windows begin.
func TestAnchorIsAWholeSecond(t *testing.T) {
	if ns := shared().UnixNano() % int64(time.Second); ns != 0 {
		t.Errorf("anchor %v is %d ns past a whole second", shared(), ns)
	}
	if shared().After(time.Now()) {
		t.Errorf("anchor %v is in the future", shared())
	}
}

// TestTickersStartedApartTickTogether: a ticker made later delivers its
// ticks at instants of one made earlier.
func TestTickersStartedApartTickTogether(t *testing.T) {
	const d = 200 * time.Millisecond
	// due is the instant a tick was delivered for (delivery may be late,
	// by less than d on any machine this runs on).
	due := func(tick time.Time) time.Time { return next(shared(), tick, d).Add(-d) }
	a := NewTicker(d)
	defer a.Stop()
	time.Sleep(67 * time.Millisecond)
	b := NewTicker(d)
	defer b.Stop()
	want := due(<-b.C)
	b.Next()
	for range 4 {
		got := due(<-a.C)
		a.Next()
		if !got.Before(want) {
			if !got.Equal(want) {
				t.Fatalf("the later ticker ticked for %v, which the earlier one skipped (it ticked for %v)", want, got)
			}
			return
		}
	}
	t.Fatalf("the earlier ticker never reached %v", want)
}
