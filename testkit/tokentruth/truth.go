// Package tokentruth holds what a client saw of a server: the arrival time
// of every streamed token. Tests compare tpsmon's windows against it.
package tokentruth

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Arrivals are token arrival times, sorted.
type Arrivals []time.Time

// Load reads a client recording: {"requests": [...]} where each request
// lists its token arrivals in Unix seconds as token_times (llama-server's
// /completion stream, one token per event) or chunks (Ollama's stream, one
// token per chunk).
func Load(path string) (Arrivals, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec struct {
		Requests []struct {
			TokenTimes []float64 `json:"token_times"`
			Chunks     []float64 `json:"chunks"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("tokentruth: %s: %w", path, err)
	}
	var out Arrivals
	for _, r := range rec.Requests {
		for _, ts := range [][]float64{r.TokenTimes, r.Chunks} {
			for _, s := range ts {
				out = append(out, time.Unix(0, int64(math.Round(s*1e9))))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tokentruth: %s: no token arrivals", path)
	}
	out.sort()
	return out, nil
}

func (a Arrivals) sort() { sort.Slice(a, func(i, j int) bool { return a[i].Before(a[j]) }) }

// Add records tokens that arrived at t.
func (a *Arrivals) Add(t time.Time, n int) {
	for range n {
		*a = append(*a, t)
	}
}

// Sorted returns the arrivals in time order.
func (a Arrivals) Sorted() Arrivals {
	b := append(Arrivals(nil), a...)
	b.sort()
	return b
}

// In counts the arrivals in [s, e).
func (a Arrivals) In(s, e time.Time) int {
	lo := sort.Search(len(a), func(i int) bool { return !a[i].Before(s) })
	hi := sort.Search(len(a), func(i int) bool { return !a[i].Before(e) })
	return hi - lo
}

// Window is what tpsmon said of one window.
type Window struct {
	Start  time.Time
	Tokens float64
}

// Row compares one window with the truth.
type Row struct {
	Start         time.Time
	Truth, Tokens float64
	Loaded        bool
	Err           float64 // |tokens - truth| / truth, for loaded windows
}

// Report is the comparison of a run's windows with the truth.
type Report struct {
	Rows []Row
	// MeanErr and MaxErr are over loaded windows.
	MeanErr, MaxErr float64
	Loaded          int
	// Truth and Tokens are the totals over all compared windows.
	Truth, Tokens float64
}

// Compare matches windows of length w against the arrivals. A window is
// loaded when its true count is at least loadedFrac of the busiest
// window's: the per-window error is measured there, where it means
// something.
func Compare(a Arrivals, ws []Window, w time.Duration, loadedFrac float64) Report {
	var r Report
	peak := 0
	for _, x := range ws {
		peak = max(peak, a.In(x.Start, x.Start.Add(w)))
	}
	for _, x := range ws {
		truth := float64(a.In(x.Start, x.Start.Add(w)))
		row := Row{Start: x.Start, Truth: truth, Tokens: x.Tokens}
		if peak > 0 && truth >= loadedFrac*float64(peak) {
			row.Loaded = true
			row.Err = math.Abs(x.Tokens-truth) / truth
			r.MeanErr += row.Err
			r.MaxErr = math.Max(r.MaxErr, row.Err)
			r.Loaded++
		}
		r.Truth += truth
		r.Tokens += x.Tokens
		r.Rows = append(r.Rows, row)
	}
	if r.Loaded > 0 {
		r.MeanErr /= float64(r.Loaded)
	}
	return r
}

// TotalErr is the relative error of the total.
func (r Report) TotalErr() float64 {
	if r.Truth == 0 {
		return math.Inf(1)
	}
	return math.Abs(r.Tokens-r.Truth) / r.Truth
}

// String is a table of the windows, for a test's log.
func (r Report) String() string {
	s := ""
	for _, x := range r.Rows {
		mark := " "
		if x.Loaded {
			mark = "*"
		}
		s += fmt.Sprintf("%s %s truth %6.0f tpsmon %8.1f err %5.1f%%\n", mark, x.Start.UTC().Format("15:04:05"),
			x.Truth, x.Tokens, 100*x.Err)
	}
	return s + fmt.Sprintf("loaded windows %d: mean error %.2f%%, worst %.2f%%; total truth %.0f tpsmon %.1f (%.2f%%)\n",
		r.Loaded, 100*r.MeanErr, 100*r.MaxErr, r.Truth, r.Tokens, 100*r.TotalErr())
}

// LoadCompact reads arrivals kept one request a line: the first arrival
// in Unix milliseconds, then each next one as milliseconds after the one
// before. A name ending in .gz is gunzipped.
func LoadCompact(path string) (Arrivals, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		z, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("tokentruth: %s: %w", path, err)
		}
		r = z
	}
	var out Arrivals
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var ms int64
		for i, fld := range strings.Fields(sc.Text()) {
			v, err := strconv.ParseInt(fld, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("tokentruth: %s line %d: %w", path, n, err)
			}
			if i == 0 {
				ms = v
			} else {
				ms += v
			}
			out = append(out, time.UnixMilli(ms))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokentruth: %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tokentruth: %s: no token arrivals", path)
	}
	out.sort()
	return out, nil
}

// AtScrapes is what exact counters read at the instants scrapes would
// give each window [start, start+w): the arrivals counted at every scrape
// instant, linearly interpolated at the window's edges between the two
// scrapes around each (as the joiner interpolates counters). No server
// reading can do better from pages taken at those instants: a window
// edge between two scrapes is known only to within that interval's
// tokens. Edges outside the scrapes take the nearest one's count.
func (a Arrivals) AtScrapes(scrapes []time.Time, starts []time.Time, w time.Duration) []Window {
	count := func(t time.Time) float64 { return float64(a.In(time.Time{}, t)) }
	at := func(t time.Time) float64 {
		i := sort.Search(len(scrapes), func(i int) bool { return !scrapes[i].Before(t) })
		switch {
		case i == 0:
			return count(scrapes[0])
		case i == len(scrapes):
			return count(scrapes[i-1])
		}
		s0, s1 := scrapes[i-1], scrapes[i]
		c0, c1 := count(s0), count(s1)
		return c0 + (c1-c0)*float64(t.Sub(s0))/float64(s1.Sub(s0))
	}
	ws := make([]Window, 0, len(starts))
	for _, s := range starts {
		ws = append(ws, Window{Start: s, Tokens: at(s.Add(w)) - at(s)})
	}
	return ws
}

// FromRequests is the arrivals of the requests, sorted.
func FromRequests(reqs []Request) Arrivals {
	var out Arrivals
	for _, r := range reqs {
		out = append(out, r.Arrivals...)
	}
	out.sort()
	return out
}
