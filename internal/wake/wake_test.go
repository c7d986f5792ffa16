package wake

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

func TestNext(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name, now string
		d         time.Duration
		want      string
	}{
		{"on an instant: the next one, not now", "2026-11-30T12:00:00Z", time.Second, "2026-11-30T12:00:01Z"},
		{"just after", "2026-11-30T12:00:00.000000001Z", time.Second, "2026-11-30T12:00:01Z"},
		{"just before", "2026-11-30T12:00:02.999999999Z", time.Second, "2026-11-30T12:00:03Z"},
		{"5 s on multiples of 5 s", "2026-11-30T12:00:07Z", 5 * time.Second, "2026-11-30T12:00:10Z"},
		{"250 ms", "2026-11-30T12:00:01.234Z", 250 * time.Millisecond, "2026-11-30T12:00:01.25Z"},
		{"700 ms, from the epoch", "1970-01-01T00:00:01.1Z", 700 * time.Millisecond, "1970-01-01T00:00:01.4Z"},
		{"a zone does not move it", "2026-11-30T13:00:00.5+01:00", time.Second, "2026-11-30T12:00:01Z"},
		{"before the epoch", "1969-12-31T23:59:58.5Z", time.Second, "1969-12-31T23:59:59Z"},
		{"before the epoch, on an instant", "1969-12-31T23:59:58Z", time.Second, "1969-12-31T23:59:59Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := next(at(tc.now), tc.d); !got.Equal(at(tc.want)) {
				t.Errorf("next(%s, %v) = %v, want %s", tc.now, tc.d, got.UTC(), tc.want)
			}
		})
	}
}

// TestTickersStartedApartTickTogether: tickers made at different moments
// tick at the same instants, whole multiples of their intervals (in a
// bubble, where time moves only when every goroutine waits).
func TestTickersStartedApartTickTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// run collects a ticker's ticks until 5 s after the bubble began.
		end := time.Now().Add(5 * time.Second)
		run := func(d time.Duration, out *[]time.Time) {
			tk := NewTicker(d)
			defer tk.Stop()
			for {
				tick := <-tk.C
				tk.Next()
				if tick.After(end) {
					return
				}
				*out = append(*out, tick)
			}
		}
		var a, b, c []time.Time
		go run(time.Second, &a)
		time.Sleep(1300 * time.Millisecond)
		go run(time.Second, &b)
		time.Sleep(400 * time.Millisecond)
		go run(500*time.Millisecond, &c)
		synctest.Wait()
		time.Sleep(6 * time.Second)
		synctest.Wait()
		secs := func(ts []time.Time) (out []float64) {
			for _, t := range ts {
				out = append(out, float64(t.Sub(end.Add(-5*time.Second)))/float64(time.Second))
			}
			return out
		}
		want := map[string][]float64{"a": {1, 2, 3, 4, 5}, "b": {2, 3, 4, 5}, "c": {2, 2.5, 3, 3.5, 4, 4.5, 5}}
		for name, got := range map[string][]float64{"a": secs(a), "b": secs(b), "c": secs(c)} {
			if fmt.Sprint(got) != fmt.Sprint(want[name]) {
				t.Errorf("ticker %s ticked at %v s, want %v s", name, got, want[name])
			}
		}
	})
}

// TestNextSkipsMissedInstants: a receiver busy past several instants gets
// one tick, at the next instant, not a backlog.
func TestNextSkipsMissedInstants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tk := NewTicker(time.Second)
		defer tk.Stop()
		first := <-tk.C
		time.Sleep(3500 * time.Millisecond) // busy
		tk.Next()
		second := <-tk.C
		if want := first.Add(4 * time.Second); !second.Equal(want) {
			t.Errorf("after a busy 3.5 s the tick came at %v, want %v", second, want)
		}
	})
}
