package collector

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// parsedTwice parses page with a cache primed by prime, the way a
// scraper's second page is read after its first.
func parsedTwice(d *Dialect, prime, page []byte) (Page, error) {
	var c seriesCache
	if _, err := d.parseFiltered(prime, &c); err != nil {
		return nil, err
	}
	return d.parseFiltered(page, &c)
}

// TestSeriesCacheReadsAsExpfmt: a page read through the cache, filled by
// an earlier page of the same server, is exactly what expfmt makes of it,
// errors included.
func TestSeriesCacheReadsAsExpfmt(t *testing.T) {
	vllm, err := DialectFor("vllm")
	if err != nil {
		t.Fatal(err)
	}
	const base = "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3\nvllm:generation_tokens_total{model_name=\"m\"} 100\n"
	for _, tc := range []struct {
		name, prime, page string
	}{
		{"same series, new values", base, "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 4\nvllm:generation_tokens_total{model_name=\"m\"} 250.5\n"},
		{"timestamps", base, "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 4 1700000000000\nvllm:generation_tokens_total{model_name=\"m\"} 2.5e3 1700000000000\n"},
		{"NaN and Inf go to expfmt", base, "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} NaN\nvllm:generation_tokens_total{model_name=\"m\"} +Inf\n"},
		{"hex is expfmt's call", base, "vllm:generation_tokens_total{model_name=\"m\"} 0x10\n"},
		{"a brace and a number in a label value", "vllm:generation_tokens_total{model_name=\"a} 7\"} 1\n", "vllm:generation_tokens_total{model_name=\"a} 7\"} 9\n"},
		{"three fields after a known series", base, "vllm:generation_tokens_total{model_name=\"m\"} 1 2 3\n"},
		{"timestamp not an integer", base, "vllm:generation_tokens_total{model_name=\"m\"} 1 2.5\n"},
		{"carriage return", base, "vllm:generation_tokens_total{model_name=\"m\"} 7\r\n"},
		{"no space before the value", base, "vllm:generation_tokens_total{model_name=\"m\"}7\n"},
		{"duplicate series", base, base + base},
		{"new series beside known ones", base, base + "vllm:num_requests_waiting{model_name=\"m\"} 2\n"},
		{"labels without braces' end", base, "vllm:generation_tokens_total{model_name=\"m\" 7\n"},
		{"no labels", "vllm:generation_tokens_total 1\n", "vllm:generation_tokens_total 2\n"},
		{"tab before the value", base, "vllm:generation_tokens_total{model_name=\"m\"}\t12\n"},
		{"last line without newline", base, "vllm:generation_tokens_total{model_name=\"m\"} 12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := vllm.ParseFiltered([]byte(tc.page))
			got, gotErr := parsedTwice(vllm, []byte(tc.prime), []byte(tc.page))
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("error %v, expfmt alone: %v", gotErr, wantErr)
			}
			if !samePage(got, want) && wantErr == nil {
				t.Errorf("cached:\n%v\nexpfmt:\n%v", got, want)
			}
		})
	}
}

// TestSeriesCacheOnFixtures: every captured page reads the same through
// the cache, on its first and its second scrape.
func TestSeriesCacheOnFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.prom")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		full, err := ParsePage(strings.NewReader(string(b)))
		if err != nil {
			continue // malformed.prom
		}
		d, err := Detect(full)
		if err != nil {
			continue
		}
		want, err := d.ParseFiltered(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var c seriesCache
		for scrape := range 2 {
			got, err := d.parseFiltered(b, &c)
			if err != nil || !samePage(got, want) {
				t.Errorf("%s scrape %d: %v\n%v\nwant\n%v", name, scrape+1, err, got, want)
			}
		}
		if len(c.known) == 0 && len(want) > 0 {
			t.Errorf("%s: nothing cached", name)
		}
	}
}

// TestSeriesCacheBounded: a server whose label values never repeat does
// not grow the cache past its bound, and is still read right.
func TestSeriesCacheBounded(t *testing.T) {
	vllm, _ := DialectFor("vllm")
	var c seriesCache
	for i := range 3 * maxCachedSeries {
		page := fmt.Sprintf("vllm:generation_tokens_total{model_name=\"m\",req=\"%d\"} %d\n", i, i)
		got, err := vllm.parseFiltered([]byte(page), &c)
		if err != nil {
			t.Fatal(err)
		}
		ss := got["vllm:generation_tokens_total"]
		if len(ss) != 1 || ss[0].value != float64(i) || ss[0].labels["req"] != fmt.Sprint(i) {
			t.Fatalf("page %d read as %v", i, got)
		}
		if len(c.known) > maxCachedSeries {
			t.Fatalf("%d series cached, bound %d", len(c.known), maxCachedSeries)
		}
	}
}

// FuzzSeriesCache: whatever a server prints on two pages, the second
// reads through the cache exactly as expfmt reads it.
func FuzzSeriesCache(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.prom")
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b, b)
		}
	}
	f.Add([]byte("vllm:generation_tokens_total{model_name=\"m\"} 1\n"), []byte("vllm:generation_tokens_total{model_name=\"m\"} 1e400\n"))
	dialects := []string{"vllm", "sglang", "tgi", "llamacpp", "trtllm", "lmdeploy", "nim"}
	f.Fuzz(func(t *testing.T, prime, page []byte) {
		for _, e := range dialects {
			d, err := DialectFor(e)
			if err != nil {
				continue
			}
			want, wantErr := d.ParseFiltered(page)
			got, gotErr := parsedTwice(d, prime, page)
			if gotErr != nil && wantErr == nil {
				// The priming page may itself be malformed.
				if _, err := d.ParseFiltered(prime); err == nil {
					t.Fatalf("%s: cached read failed: %v (expfmt read it)", e, gotErr)
				}
				continue
			}
			if gotErr == nil && wantErr != nil {
				t.Fatalf("%s: cached read took a page expfmt refuses: %v", e, wantErr)
			}
			if gotErr == nil && !samePage(got, want) {
				t.Fatalf("%s: cached\n%v\nexpfmt\n%v", e, got, want)
			}
		}
	})
}

// samePage compares pages value by value, NaN equal to NaN.
func samePage(a, b Page) bool {
	if len(a) != len(b) {
		return false
	}
	for name, as := range a {
		bs, ok := b[name]
		if !ok || len(as) != len(bs) {
			return false
		}
		for i := range as {
			x, y := as[i].value, bs[i].value
			if !maps.Equal(as[i].labels, bs[i].labels) || (x != y && !(math.IsNaN(x) && math.IsNaN(y))) {
				return false
			}
		}
	}
	return true
}

// TestCachedScrapeReadsAsReplay: a live scrape's sample (the cache's page,
// its bucket series' edges and label sets worked out once) is what replay
// reads from the same page with its dialect known, histograms included, on the first scrape and
// the next ones.
func TestCachedScrapeReadsAsReplay(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.prom")
	hists := 0
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		_, d, err := ReadPage(b, nil)
		if err != nil {
			continue // malformed, or no engine's page
		}
		// Replay with the dialect known reads the page filtered, as a
		// scraper does, without the cache.
		want, _, err := ReadPage(b, d)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for h := range want.HasHist {
			if want.HasHist[h] {
				hists++
			}
		}
		var c seriesCache
		for scrape := range 3 {
			got, _, err := readPage(b, d, &c)
			if err != nil {
				t.Fatalf("%s scrape %d: %v", name, scrape+1, err)
			}
			got.Engine = want.Engine
			if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
				t.Errorf("%s scrape %d:\n%s\nwant\n%s", name, scrape+1, g, w)
			}
		}
	}
	if hists < 5 {
		t.Errorf("%d histograms in the fixtures: the test reads too few", hists)
	}
}

// TestReadPlanFollowsShape: a scraper reads page after page through its
// series cache, and the pages of one shape with the plan Read made on the
// first of them. Each page's sample must be what replay reads from it
// alone; the plan is kept exactly while the pages keep their shape, and
// made again when it changes. Every page has new values, so a value read
// at the wrong position would show.
func TestReadPlanFollowsShape(t *testing.T) {
	vllm := []string{
		`vllm:generation_tokens_total{engine="0",model_name="m"}`,
		`vllm:generation_tokens_total{engine="1",model_name="m"}`,
		`vllm:prompt_tokens_total{engine="0",model_name="m"}`,
		`vllm:num_requests_running{engine="0",model_name="m"}`,
		`vllm:num_requests_running{engine="1",model_name="m"}`,
		`vllm:kv_cache_usage_perc{engine="0",model_name="m"}`,
		`vllm:kv_cache_usage_perc{engine="1",model_name="m"}`,
		`vllm:request_success_total{finished_reason="stop",model_name="m"}`,
		`vllm:request_success_total{finished_reason="abort",model_name="m"}`,
		`vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"}`,
		`vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"}`,
		`vllm:time_to_first_token_seconds_sum{model_name="m"}`,
		`vllm:time_to_first_token_seconds_count{model_name="m"}`,
	}
	sglang := []string{
		`sglang:num_running_reqs{model_name="m",tp_rank="0"}`,
		`sglang:num_running_reqs{model_name="m",tp_rank="1"}`,
		`sglang:token_usage{model_name="m",tp_rank="0"}`,
		`sglang:gen_throughput{model_name="m",tp_rank="0"}`,
		`sglang:generation_tokens_total{model_name="m",tp_rank="0"}`,
		`sglang:prompt_tokens_total{model_name="m",tp_rank="0"}`,
	}
	// Histograms: two label sets summed by edge, edges out of order, one
	// without +Inf (its _count, the last line, stands for it while it is
	// not below the last bucket: odd sets it low), and rank 1 left out.
	hists := []string{
		`vllm:generation_tokens_total{model_name="m"}`,
		`vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="m"}`,
		`vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"}`,
		`vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="n"}`,
		`vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="n"}`,
		`vllm:e2e_request_latency_seconds_sum{model_name="m"}`,
		`vllm:e2e_request_latency_seconds_sum{model_name="n"}`,
		`vllm:request_queue_time_seconds_bucket{le="1",model_name="m"}`,
		`vllm:request_queue_time_seconds_bucket{le="0.1",model_name="m"}`,
		`vllm:request_queue_time_seconds_bucket{le="+Inf",model_name="m"}`,
		`vllm:request_prefill_time_seconds_bucket{le="0.1",model_name="m"}`,
		`vllm:request_prefill_time_seconds_bucket{le="1",model_name="m"}`,
		`vllm:request_prefill_time_seconds_count{model_name="m"}`,
	}
	sglangHists := append(slices.Clone(sglang),
		`sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m",tp_rank="0"}`,
		`sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m",tp_rank="0"}`,
		`sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="m",tp_rank="1"}`,
		`sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m",tp_rank="1"}`,
		`sglang:time_to_first_token_seconds_sum{model_name="m",tp_rank="0"}`)
	swap := func(s []string, i, j int) []string {
		s = slices.Clone(s)
		s[i], s[j] = s[j], s[i]
		return s
	}
	for _, tc := range []struct {
		engine string
		pages  [][]string // each page's series; values are made per page
		same   []bool     // page i has page i-1's shape
		odd    map[int]string
		// oddLine is the line odd's value is given to (-1: the last).
		oddLine int
	}{
		{"vllm", [][]string{vllm, vllm, vllm,
			append(slices.Clone(vllm), `vllm:num_requests_waiting{model_name="m"}`), // a series more
			append(slices.Clone(vllm), `vllm:num_requests_waiting{model_name="m"}`),
			vllm[1:], vllm[1:], // one fewer
			swap(vllm, 0, 3), swap(vllm, 0, 3), // the same series in another order
			append(slices.Clone(vllm[:len(vllm)-1]), `vllm:time_to_first_token_seconds_count{model_name="n"}`), // a label value
			vllm, vllm, // NaN on the first, then plain again
			append(slices.Clone(vllm), vllm[0]), append(slices.Clone(vllm), vllm[0]), // a series printed twice
		}, []bool{false, true, true, false, true, false, true, false, true, false, false, true, false, true},
			map[int]string{10: "NaN"}, 0},
		{"sglang", [][]string{sglang, sglang, swap(sglang, 0, 1), swap(sglang, 0, 1), sglang[1:], sglang[1:]},
			[]bool{false, true, false, true, false, true}, nil, 0},
		{"vllm histograms", [][]string{hists, hists, hists, hists, swap(hists, 1, 3), swap(hists, 1, 3), hists[:len(hists)-1], hists[:len(hists)-1]},
			[]bool{false, true, true, true, false, true, false, true}, map[int]string{2: "1"}, -1},
		{"sglang histograms", [][]string{sglangHists, sglangHists, sglangHists, swap(sglangHists, 6, 8), swap(sglangHists, 6, 8)},
			[]bool{false, true, true, false, true}, nil, 0},
	} {
		t.Run(tc.engine, func(t *testing.T) {
			d, err := DialectFor(strings.Fields(tc.engine)[0]) // "vllm histograms": vllm
			if err != nil {
				t.Fatal(err)
			}
			var c seriesCache
			for i, lines := range tc.pages {
				var b strings.Builder
				for j, l := range lines {
					v := fmt.Sprint(float64((i+1)*1000 + j*7 + 1))
					if odd := tc.oddLine; (j == odd || odd < 0 && j == len(lines)-1) && tc.odd[i] != "" {
						v = tc.odd[i]
					}
					fmt.Fprintf(&b, "%s %s\n", l, v)
				}
				page := []byte(b.String())
				want, _, werr := ReadPage(page, d)
				gen := c.gen
				got, _, err := readPage(page, d, &c)
				if (err == nil) != (werr == nil) {
					t.Fatalf("page %d: error %v, replay's %v", i, err, werr)
				}
				got.Engine = want.Engine
				if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
					t.Errorf("page %d:\n%s\nwant\n%s", i, g, w)
				}
				if same := c.gen == gen; same != tc.same[i] || c.plan.ready != (err == nil) {
					t.Errorf("page %d: shape kept %v, want %v (plan ready %v)", i, same, tc.same[i], c.plan.ready)
				}
			}
		})
	}
}
