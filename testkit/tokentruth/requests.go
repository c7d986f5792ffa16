package tokentruth

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/analysis/latency"
)

// Request is what the client saw of one request: when it sent it, when
// each token arrived, when it ended.
type Request struct {
	Start, End time.Time
	OK         bool // completed without error
	Level      int  // concurrent streams of its phase
	Arrivals   []time.Time
}

// TTFT is the time from sending to the first token (0, false: none came).
func (r Request) TTFT() (float64, bool) {
	if len(r.Arrivals) == 0 {
		return 0, false
	}
	return r.Arrivals[0].Sub(r.Start).Seconds(), true
}

// TPOT is the request's mean gap between tokens: its decode time over its
// tokens after the first (false with fewer than two tokens).
func (r Request) TPOT() (float64, bool) {
	n := len(r.Arrivals)
	if n < 2 {
		return 0, false
	}
	return r.Arrivals[n-1].Sub(r.Arrivals[0]).Seconds() / float64(n-1), true
}

// LoadRequests reads a compact request file (gzip): a line per request,
// "t_start t_end ok level first d1 d2 …", times in Unix microseconds and
// each arrival after the first as microseconds after the one before.
func LoadRequests(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("tokentruth: %s: %w", path, err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var out []Request
	for line := 1; sc.Scan(); line++ {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 {
			return nil, fmt.Errorf("tokentruth: %s:%d: %d fields, want at least 4", path, line, len(fs))
		}
		nums := make([]int64, len(fs))
		for i, s := range fs {
			if nums[i], err = strconv.ParseInt(s, 10, 64); err != nil {
				return nil, fmt.Errorf("tokentruth: %s:%d: %w", path, line, err)
			}
		}
		r := Request{Start: time.UnixMicro(nums[0]).UTC(), End: time.UnixMicro(nums[1]).UTC(), OK: nums[2] == 1, Level: int(nums[3])}
		t := int64(0)
		for i, n := range nums[4:] {
			if i == 0 {
				t = n
			} else {
				t += n
			}
			r.Arrivals = append(r.Arrivals, time.UnixMicro(t).UTC())
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokentruth: %s: %w", path, err)
	}
	return out, nil
}

// Latency is what the client felt in one window, of the requests that
// ended in it (where tpsmon places a request's own line): their TTFT and
// TPOT, every token gap that ended in the window, and the share that met
// an objective.
type Latency struct {
	Start      time.Time
	Requests   int
	Level      int // the level most of them ran at
	TTFT, TPOT []float64
	Gaps       []float64
	Attainment latency.Attainment
	// Borderline counts the requests whose TTFT, TPOT or end-to-end time
	// lies within BorderBand of an objective given: the client's own reads
	// move a value that much, so such a request may have met it or not.
	Borderline int
}

// BorderBand is how near an objective, relatively, a client-timed value
// is on the border: a 380 ms decode read 20 ms late (a loaded machine's
// stall of the client) is 5 % slower.
const BorderBand = 0.05

// borderline says whether one of a request's values lies within
// BorderBand of its objective.
func borderline(r latency.Request, o latency.Objective) bool {
	near := func(v float64, obj time.Duration) bool {
		return obj > 0 && !math.IsNaN(v) && math.Abs(v-obj.Seconds()) <= BorderBand*obj.Seconds()
	}
	return near(r.TTFT, o.TTFT) || near(r.TPOT, o.TPOT) || near(r.E2E, o.E2E)
}

// Quantile returns the exact q-quantile of xs (latency.FromValues).
func Quantile(xs []float64, q float64) latency.Quantile { return latency.FromValues(xs, q) }

// Windows groups requests by the w-long window their end falls in.
func Windows(reqs []Request, w time.Duration, o latency.Objective) map[time.Time]*Latency {
	out := map[time.Time]*Latency{}
	levels := map[time.Time]map[int]int{}
	get := func(t time.Time) *Latency {
		s := t.Truncate(w)
		if out[s] == nil {
			out[s] = &Latency{Start: s}
			levels[s] = map[int]int{}
		}
		return out[s]
	}
	byWin := map[time.Time][]latency.Request{}
	for _, r := range reqs {
		l := get(r.End)
		l.Requests++
		levels[l.Start][r.Level]++
		lr := latency.Request{TTFT: math.NaN(), TPOT: math.NaN(), E2E: r.End.Sub(r.Start).Seconds(),
			OutputTokens: float64(len(r.Arrivals)), Failed: !r.OK}
		if v, ok := r.TTFT(); ok {
			l.TTFT = append(l.TTFT, v)
			lr.TTFT = v
		}
		if v, ok := r.TPOT(); ok {
			l.TPOT = append(l.TPOT, v)
			lr.TPOT = v
		}
		byWin[l.Start] = append(byWin[l.Start], lr)
		if r.OK && borderline(lr, o) {
			l.Borderline++
		}
		for i := 1; i < len(r.Arrivals); i++ {
			g := get(r.Arrivals[i])
			g.Gaps = append(g.Gaps, r.Arrivals[i].Sub(r.Arrivals[i-1]).Seconds())
		}
	}
	for s, l := range out {
		best := 0
		for lvl, n := range levels[s] {
			if n > best || n == best && lvl > l.Level {
				best, l.Level = n, lvl
			}
		}
		l.Attainment = latency.FromRequests(byWin[s], o)
	}
	return out
}
