package accuracy

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis/latency"
	"github.com/tpsmon/tpsmon/testkit/tokentruth"
)

// TestLatencyAgainstClients replays the real recordings' logs and holds
// tpsmon's per-window latencies to what the clients measured, request by
// request (the requests that ended in the window, where tpsmon places a
// request's own line):
//
//   - ITL: tpsmon's from a log is each request's mean gap between tokens
//     (its eval time over its gaps); the client's of the same definition
//     is (last arrival − first) / (tokens − 1). Held within 10 % at p50 and
//     p90 in every window. The client's per-gap quantiles are in the table
//     too: a log does not print the gaps, and they spread wider than the
//     requests' means.
//   - Attainment of a time-per-token objective: within 5 points.
//   - TTFT, by what the log lets tpsmon time it from (ttft_basis, held
//     per recording; holdTTFT says what is held of the values): "http",
//     the server's HTTP handler's line (-lv 4 with its stamps); "slot",
//     the loop's taking the request into a slot (-lv 3 with stamps; the
//     HTTP handling and the wait for the loop's decode step, 1-12 ms here,
//     are not in it); "prefill" (Ollama's bare relayed lines): the
//     prompt's evaluation only.
func TestLatencyAgainstClients(t *testing.T) {
	for _, c := range []struct {
		name     string
		requests string
		args     func(t *testing.T) []string
		window   time.Duration
		tpot     time.Duration
		basis    string // the windows' ttft_basis
		// levels that must have at least minWindows loaded windows each
		levels     []int
		minWindows int
	}{
		{"llama.cpp sweep, docker-stamped log", "llamacpp-sweep/requests.txt.gz", func(t *testing.T) []string {
			return []string{"--log", gunzip(t, "llamacpp-sweep/server-stderr-ts.log.gz")}
		}, 10 * time.Second, 5500 * time.Microsecond, "slot", []int{1, 2, 4, 6, 8}, 4},
		{"llama.cpp run1, docker-stamped log", "llamacpp-run1/requests.txt.gz", func(t *testing.T) []string {
			return []string{"--log", gunzip(t, "llamacpp-run1/server-stderr-ts.log.gz")}
		}, 10 * time.Second, 5500 * time.Microsecond, "slot", []int{1, 4}, 4},
		{"ollama, relayed timing lines", "ollama-default/requests.txt.gz", func(t *testing.T) []string {
			return []string{"--log", gunzip(t, "ollama-default/ollama.log.gz")}
		}, 10 * time.Second, 5500 * time.Microsecond, "prefill", []int{1, 4}, 4},
		{"llama.cpp live sweep, -lv 4 log", "llamacpp-lv4/requests.txt.gz", func(t *testing.T) []string {
			started, err := os.ReadFile(filepath.Join("testdata", "llamacpp-lv4", "started-at.txt"))
			if err != nil {
				t.Fatal(err)
			}
			return []string{"--log", gunzip(t, "llamacpp-lv4/server.log.gz"), "--started-at", strings.TrimSpace(string(started))}
		}, 5 * time.Second, sweepObjective.TPOT, "http", []int{1, 2, 4, 6, 8}, 4},
		// Prompts of about 400 tokens (TestLiveLongPromptTTFT's run): TTFT
		// is its prefill, 110-580 ms, and its p90 is held too. The
		// objective sits between the levels' TPOTs (5-7 ms at one
		// stream, 19 ms and more at four), on no request's border.
		{"llama.cpp live long prompts, -lv 4 log", "llamacpp-longprompt/requests.txt.gz", func(t *testing.T) []string {
			started, err := os.ReadFile(filepath.Join("testdata", "llamacpp-longprompt", "started-at.txt"))
			if err != nil {
				t.Fatal(err)
			}
			return []string{"--log", gunzip(t, "llamacpp-longprompt/server.log.gz"), "--started-at", strings.TrimSpace(string(started))}
		}, 5 * time.Second, 12 * time.Millisecond, "http", []int{1, 4, 8}, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			reqs, err := tokentruth.LoadRequests(filepath.Join("testdata", c.requests))
			if err != nil {
				t.Fatal(err)
			}
			// Only requests the log can see: the server cancelled some
			// without a timing line (llamacpp-run1), the client did not.
			var ok []tokentruth.Request
			for _, r := range reqs {
				if r.OK {
					ok = append(ok, r)
				}
			}
			truth := tokentruth.Windows(ok, c.window, latency.Objective{TPOT: c.tpot})
			pts, _ := replayed(t, append(c.args(t), "--window", c.window.String(), "--slo-tpot", c.tpot.String())...)
			rep := compareLatency(pts, truth, 10)
			t.Logf("TTFT from %q\n%s", rep.basis(), rep)
			perLevel := map[int]int{}
			for _, r := range rep.rows {
				perLevel[r.level]++
			}
			total := 0
			for _, l := range c.levels {
				total += perLevel[l]
				if perLevel[l] < c.minWindows {
					t.Errorf("level %d: %d loaded windows, want at least %d", l, perLevel[l], c.minWindows)
				}
			}
			for _, r := range rep.rows {
				if r.ttftBasis != c.basis {
					t.Errorf("window %v (level %d): ttft_basis %q, want %q", r.start, r.level, r.ttftBasis, c.basis)
				}
				for _, e := range []struct {
					name      string
					got, want float64
				}{{"ITL p50", r.itl50, r.cITL50}, {"ITL p90", r.itl90, r.cITL90}} {
					if math.IsNaN(e.got) && r.n < 20 {
						continue // the log saw fewer than a p90 needs (requests cut at the window's edge)
					}
					if !(math.Abs(e.got/e.want-1) <= 0.10) {
						t.Errorf("window %v (level %d): %s %.3f ms, client %.3f ms: more than 10 %% off", r.start, r.level, e.name, 1e3*e.got, 1e3*e.want)
					}
				}
				if !(math.Abs(r.att-r.cAtt) <= 0.05) {
					t.Errorf("window %v (level %d): attainment %.3f, client %.3f: more than 5 points off", r.start, r.level, r.att, r.cAtt)
				}
			}
			holdTTFT(t, rep)
			if strings.Contains(c.requests, "longprompt") {
				for _, m := range rep.levels() {
					if !(m.ttft90 <= 0.10) {
						t.Errorf("level %d: TTFT p90 off the client's by %.1f %%, the mean of %d windows: want at most 10 %%", m.level, 100*m.ttft90, m.n)
					}
				}
			}
			if len(c.levels) >= 3 && total < 20 {
				t.Errorf("%d loaded windows at levels %v, want at least 20", total, c.levels)
			}
		})
	}
}

// holdTTFT holds tpsmon's TTFT to the client's (send to first arrival):
//
//   - Every window, every basis: p50 and p90 never above the client's by
//     more than 10 %. A log leaves time out; it cannot add any.
//   - Basis "http", at a level whose client p50 is 20 ms or more: p50
//     within 10 % as the mean of the windows' errors (a level's windows
//     are one load). The time no server line sees, the client's connect
//     and send and the server's accept and read before the handler, was
//     1-2 ms at p50 on the 2-core machine shared with other jobs the
//     recordings were made on (more than 10 % of the 10-18 ms at one and
//     two streams there), and its tail is the client's own stalls (a
//     client descheduled for 40-90 ms, which no server can see): the p90
//     is tabled, not held. Both are of this CPU server's millisecond
//     TTFTs, not of a GPU server's under load.
func holdTTFT(t *testing.T, rep latencyReport) {
	t.Helper()
	ttftNotAbove(t, rep, true)
	if rep.basis() == "http" {
		ttftWithin(t, rep, 0.020, 2, false)
	}
}

// ttftNotAbove holds every window's TTFT p50 (and p90, when asked) to at most the
// client's and 10 %.
func ttftNotAbove(t *testing.T, rep latencyReport, p90 bool) {
	t.Helper()
	for _, r := range rep.rows {
		qs := []struct {
			name      string
			got, want float64
		}{{"TTFT p50", r.ttft50, r.cTTFT50}, {"TTFT p90", r.ttft90, r.cTTFT90}}
		if !p90 {
			qs = qs[:1]
		}
		for _, e := range qs {
			if e.got > 1.10*e.want {
				t.Errorf("window %v (level %d): %s %.2f ms from %s, above the client's %.2f ms", r.start, r.level, e.name, 1e3*e.got, r.ttftBasis, 1e3*e.want)
			}
		}
	}
}

// ttftWithin holds the TTFT p50 within 10 % of the client's at each
// level whose client p50 is minClient seconds or more, and at minLevels
// levels at least: the mean of the level's windows' errors, or with median their
// median (a live run's level holds a window or two the client stalled in).
func ttftWithin(t *testing.T, rep latencyReport, minClient float64, minLevels int, median bool) {
	t.Helper()
	held := 0
	for _, m := range rep.levels() {
		if m.n50 == 0 || m.cTTFT50 < minClient {
			continue
		}
		held++
		err, of := m.ttft50, "mean"
		if median {
			err, of = m.med50, "median"
		}
		if !(err <= 0.10) {
			t.Errorf("level %d: TTFT p50 off the client's %.1f ms by %.1f %% (the %s of %d windows), want at most 10 %%",
				m.level, 1e3*m.cTTFT50, 100*err, of, m.n50)
		}
	}
	if held < minLevels {
		t.Errorf("TTFT held at %d levels, want at least %d with a client p50 of %.0f ms or more", held, minLevels, 1e3*minClient)
	}
}

type latencyRow struct {
	start            time.Time
	level, n         int
	border           int     // requests on the border of the objective (tokentruth.BorderBand)
	ttft50, ttft90   float64 // tpsmon
	cTTFT50, cTTFT90 float64 // client
	itl50, itl90     float64
	cITL50, cITL90   float64 // client, per request
	gap50, gap90     float64 // client, per gap
	att, cAtt        float64
	latencySource    string
	ttftBasis        string
}

type latencyReport struct{ rows []latencyRow }

// compareLatency lines tpsmon's windows up with the client's: windows of
// at least minReqs requests (a p90 needs 10, a p50 2) at one level.
func compareLatency(pts []point, truth map[time.Time]*tokentruth.Latency, minReqs int) latencyReport {
	var rep latencyReport
	for _, p := range pts {
		tr := truth[p.Time.UTC()]
		if tr == nil || tr.Requests < minReqs {
			continue
		}
		q := func(xs []float64, q float64) float64 {
			v := tokentruth.Quantile(xs, q)
			if !v.OK {
				return math.NaN()
			}
			return v.Value
		}
		num := func(k string) float64 {
			if v, ok := p.num(k); ok {
				return v
			}
			return math.NaN()
		}
		r := latencyRow{start: p.Time.UTC(), level: tr.Level, n: tr.Requests, border: tr.Borderline,
			ttft50: num("ttft_p50_s"), ttft90: num("ttft_p90_s"), cTTFT50: q(tr.TTFT, 0.5), cTTFT90: q(tr.TTFT, 0.9),
			itl50: num("itl_p50_s"), itl90: num("itl_p90_s"), cITL50: q(tr.TPOT, 0.5), cITL90: q(tr.TPOT, 0.9),
			gap50: q(tr.Gaps, 0.5), gap90: q(tr.Gaps, 0.9), att: num("slo_attainment"), cAtt: tr.Attainment.Lo}
		if s, ok := p.Fields["latency_source"].(string); ok {
			r.latencySource = s
		}
		if s, ok := p.Fields["ttft_basis"].(string); ok {
			r.ttftBasis = s
		}
		rep.rows = append(rep.rows, r)
	}
	sort.Slice(rep.rows, func(i, j int) bool { return rep.rows[i].start.Before(rep.rows[j].start) })
	return rep
}

// levelErr is the mean over a level's windows of tpsmon's relative error
// against the client (attainment: points).
type levelErr struct {
	level                             int
	n50, n                            int // windows with p50s, with p90s
	ttft50, ttft90, itl50, itl90, att float64
	cTTFT50                           float64 // the client's p50, mean over the windows
	med50, med90                      float64 // the median window's TTFT p50 and p90 errors
	errs50, errs90                    []float64
}

// levels are the mean errors of each level: the p50s over the windows
// with a p50 on both sides, the p90s and attainment over those with a
// p90.
func (rep latencyReport) levels() []levelErr {
	per := map[int]*levelErr{}
	for _, r := range rep.rows {
		a := per[r.level]
		if a == nil {
			a = &levelErr{level: r.level}
			per[r.level] = a
		}
		if !math.IsNaN(r.ttft50 + r.cTTFT50 + r.itl50 + r.cITL50) {
			a.n50++
			a.cTTFT50 += r.cTTFT50
			a.ttft50 += math.Abs(r.ttft50/r.cTTFT50 - 1)
			a.errs50 = append(a.errs50, math.Abs(r.ttft50/r.cTTFT50-1))
			a.itl50 += math.Abs(r.itl50/r.cITL50 - 1)
		}
		if !math.IsNaN(r.ttft90 + r.cTTFT90 + r.itl90 + r.cITL90 + r.att) {
			a.n++
			a.ttft90 += math.Abs(r.ttft90/r.cTTFT90 - 1)
			a.errs90 = append(a.errs90, math.Abs(r.ttft90/r.cTTFT90-1))
			a.itl90 += math.Abs(r.itl90/r.cITL90 - 1)
			a.att += math.Abs(r.att - r.cAtt)
		}
	}
	out := make([]levelErr, 0, len(per))
	for _, a := range per {
		if a.n50 > 0 {
			n := float64(a.n50)
			a.ttft50, a.itl50, a.cTTFT50 = a.ttft50/n, a.itl50/n, a.cTTFT50/n
			a.med50 = tokentruth.Quantile(a.errs50, 0.5).Value
		}
		if a.n > 0 {
			n := float64(a.n)
			a.ttft90, a.itl90, a.att = a.ttft90/n, a.itl90/n, a.att/n
			a.med90 = tokentruth.Quantile(a.errs90, 0.5).Value
		}
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].level < out[j].level })
	return out
}

// basis is the windows' ttft_basis, "mixed" where they differ.
func (rep latencyReport) basis() string {
	b := ""
	for _, r := range rep.rows {
		switch {
		case b == "":
			b = r.ttftBasis
		case b != r.ttftBasis:
			return "mixed"
		}
	}
	return b
}

func (rep latencyReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %5s %4s | %-15s %-15s | %-15s %-15s | %-11s %-11s | %-13s\n", "window", "level", "reqs",
		"TTFT p50 ms", "TTFT p90 ms", "ITL p50 ms", "ITL p90 ms", "gap p50/p90", "", "attainment")
	fmt.Fprintf(&b, "%-8s %5s %4s | %-15s %-15s | %-15s %-15s | %-11s %-11s | %-13s\n", "", "", "",
		"tpsmon/client", "tpsmon/client", "tpsmon/client", "tpsmon/client", "client", "", "tpsmon/client")
	for _, r := range rep.rows {
		fmt.Fprintf(&b, "%-8s %5d %4d | %6.2f / %6.2f %6.2f / %6.2f | %6.3f / %6.3f %6.3f / %6.3f | %5.2f/%5.2f %11s | %5.3f / %5.3f\n",
			r.start.Format("15:04:05"), r.level, r.n, 1e3*r.ttft50, 1e3*r.cTTFT50, 1e3*r.ttft90, 1e3*r.cTTFT90,
			1e3*r.itl50, 1e3*r.cITL50, 1e3*r.itl90, 1e3*r.cITL90, 1e3*r.gap50, 1e3*r.gap90, r.ttftBasis, r.att, r.cAtt)
	}
	fmt.Fprintf(&b, "mean |error| per level: level windows (p50/p90) TTFT p50 / p90 (vs client; client p50 ms; median window's p50) | ITL p50 / p90 | attainment (points)\n")
	for _, a := range rep.levels() {
		fmt.Fprintf(&b, "  %d %3d/%-3d  %5.1f %% / %5.1f %% (%5.1f; %5.1f %%) | %4.1f %% / %4.1f %% | %4.1f\n", a.level, a.n50, a.n,
			100*a.ttft50, 100*a.ttft90, 1e3*a.cTTFT50, 100*a.med50, 100*a.itl50, 100*a.itl90, 100*a.att)
	}
	return b.String()
}
