package accuracy

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sim/vllmsim"
)

// TestReplayHistogramTruth replays metrics pages of a fake vLLM whose
// requests' latencies are known (sim/vllmsim.Latencies, scraped every
// second) and holds tpsmon's written fields to them: every window's TTFT
// p50 and p90 lie in the bucket tpsmon names, and the attainment of an
// objective on a bucket edge is exact.
func TestReplayHistogramTruth(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0).UTC()
	var reqs []vllmsim.Request
	for w := range 8 {
		ws := t0.Add(time.Duration(w) * 10 * time.Second)
		for i := range 40 {
			f := float64((i*37+w*11)%40) / 40
			reqs = append(reqs, vllmsim.Request{Start: ws.Add(time.Duration(100+i*50) * time.Millisecond),
				TTFT: time.Duration((0.02 + 1.5*f*f) * float64(time.Second)), TPOT: 20 * time.Millisecond, OutputTokens: 20})
		}
	}
	page := vllmsim.Latencies{Model: "m", Requests: reqs}
	dir := t.TempDir()
	for sec := 0; sec <= 90; sec++ {
		at := t0.Add(time.Duration(sec) * time.Second)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.prom", at.UnixMilli())), []byte(page.Page(at)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pts, stderr := replayed(t, "--metrics-dir", dir, "--window", "10s", "--slo-ttft", "1s")
	checked := 0
	for _, p := range pts {
		var ttft []float64
		met := 0
		for _, r := range reqs {
			if !r.Start.Before(p.Time) && r.Start.Before(p.Time.Add(10*time.Second)) {
				ttft = append(ttft, r.TTFT.Seconds())
				if r.TTFT <= time.Second {
					met++
				}
			}
		}
		if len(ttft) == 0 {
			continue
		}
		for _, q := range []struct {
			name string
			q    float64
		}{{"ttft_p50", 0.5}, {"ttft_p90", 0.9}} {
			lo, okLo := p.num(q.name + "_lo_s")
			hi, okHi := p.num(q.name + "_hi_s")
			rank := q.q * float64(len(ttft))
			if !okLo || !okHi || !(countAtMost(ttft, lo) < rank || lo == hi) || countAtMost(ttft, hi) < rank {
				t.Errorf("window %v %s: (%g, %g] (%v %v) does not hold rank %g of %v", p.Time, q.name, lo, hi, okLo, okHi, rank, ttft)
			}
			checked++
		}
		// 1 s is one of vLLM's TTFT edges: the attainment is exact.
		if a, ok := p.num("slo_attainment"); !ok || math.Abs(a-float64(met)/float64(len(ttft))) > 1e-9 {
			t.Errorf("window %v: slo_attainment %v (%v), want %g exactly", p.Time, a, ok, float64(met)/float64(len(ttft)))
		}
		if s, _ := p.Fields["latency_source"].(string); s != "histogram" {
			t.Errorf("window %v: latency_source %q", p.Time, s)
		}
	}
	if checked < 12 {
		t.Fatalf("only %d quantiles checked\n%s", checked, stderr)
	}
}

// TestReplayRealHistogramPages replays two pages: a real one from the
// fixtures, and the same page with known observations added to its TTFT
// buckets a second later. The window's quantiles are those of the added
// observations alone, in the buckets of the real page's layout.
func TestReplayRealHistogramPages(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("..", "..", "collector", "testdata", "metrics_docs_v0.4_era.prom"))
	if err != nil {
		t.Fatal(err)
	}
	// 30 observations: 10 in (0.25, 0.5], 20 in (1, 2.5].
	add := map[string]float64{}
	for _, le := range []string{"0.5", "0.75", "1.0"} {
		add[le] = 10
	}
	for _, le := range []string{"2.5", "5.0", "7.5", "10.0", "15.0", "20.0", "25.0", "30.0", "+Inf"} {
		add[le] = 30
	}
	bucket := regexp.MustCompile(`^(sglang:time_to_first_token_seconds_bucket\{le="([^"]+)",[^}]*\}) (\S+)$`)
	count := regexp.MustCompile(`^(sglang:time_to_first_token_seconds_count\{[^}]*\}) (\S+)$`)
	var next []string
	for _, l := range strings.Split(string(base), "\n") {
		if m := bucket.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[3], 64)
			l = fmt.Sprintf("%s %g", m[1], v+add[m[2]])
		} else if m := count.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			l = fmt.Sprintf("%s %g", m[1], v+30)
		}
		next = append(next, l)
	}
	dir := t.TempDir()
	t0 := time.Unix(1_800_000_002, 0)
	for i, body := range []string{string(base), strings.Join(next, "\n")} {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.prom", t0.Add(time.Duration(i)*time.Second).UnixMilli())), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pts, _ := replayed(t, "--metrics-dir", dir, "--window", "10s")
	if len(pts) == 0 {
		t.Fatal("no window")
	}
	p := pts[0]
	for _, c := range []struct {
		field  string
		lo, hi float64
	}{{"ttft_p50_s", 1, 2.5}, {"ttft_p90_s", 1, 2.5}} {
		lo, _ := p.num(strings.TrimSuffix(c.field, "_s") + "_lo_s")
		hi, _ := p.num(strings.TrimSuffix(c.field, "_s") + "_hi_s")
		v, ok := p.num(c.field)
		if !ok || lo != c.lo || hi != c.hi || v <= lo || v > hi {
			t.Errorf("%s = %v (%v) in (%v, %v], want in (%v, %v]", c.field, v, ok, lo, hi, c.lo, c.hi)
		}
	}
	// p99 of 30 observations: too few, absent.
	if v, ok := p.num("ttft_p99_s"); ok {
		t.Errorf("ttft_p99_s = %v from 30 observations", v)
	}
}

func countAtMost(xs []float64, v float64) float64 {
	n := 0.0
	for _, x := range xs {
		if x <= v {
			n++
		}
	}
	return n
}
