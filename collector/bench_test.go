package collector

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/cpuclock"
	"github.com/tpsmon/tpsmon/sample"
)

func BenchmarkMetricsPage(b *testing.B) {
	for _, f := range []string{"v1_two_engines.prom", "nim_llm_metrics_datadog_fixture.prom", "metrics_docs_v0.4_era.prom",
		"tgi_written.prom", "metrics_2025_06_no_kv.prom", "nv_trt_llm_metrics_readme.prom", "lmdeploy_written.prom"} {
		page := []byte(readFixture(b, f))
		full, err := ParsePage(bytes.NewReader(page))
		if err != nil {
			b.Fatal(err)
		}
		d, err := Detect(full) // once, as a scraper does
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f, func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			for range b.N {
				p, err := d.ParseFiltered(page)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := d.Read(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkScrape is one scrape over loopback HTTP of a vLLM page padded
// with histogram buckets as a real server's is (about 20 KB): request,
// read, parse, derive. The server's side runs in the same process.
func BenchmarkScrape(b *testing.B) {
	page := readFixture(b, "v1_two_engines.prom")
	var pad strings.Builder
	for i := range 10 {
		for _, le := range []string{"0.001", "0.005", "0.01", "0.05", "0.1", "0.5", "1.0", "5.0", "10.0", "+Inf"} {
			fmt.Fprintf(&pad, "vllm:padding_%d_seconds_bucket{le=%q,model_name=\"m\"} %d\n", i, le, 100*i)
		}
	}
	body := []byte(page + pad.String())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer srv.Close()
	d, err := DialectFor("vllm")
	if err != nil {
		b.Fatal(err)
	}
	s := &Scraper{Server: "bench", URL: srv.URL, Interval: time.Second, Dialect: d, Client: NewClient(5 * time.Second)}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if r := s.Scrape(context.Background()); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
}

// BenchmarkDerive is what each scrape of a vLLM server costs after the
// page is read: the Guard's checks of its counters and gauges and the
// derivation, on counters that grow steadily.
func BenchmarkDerive(b *testing.B) {
	var der Deriver
	s := sample.Server{Time: time.Unix(1000, 0)}
	for _, c := range []sample.Counter{sample.GenerationTokens, sample.PromptTokens, sample.Preemptions, sample.ITLSum, sample.ITLCount} {
		s.SetCounter(c, 1000)
	}
	for _, g := range []sample.Gauge{sample.Running, sample.Waiting, sample.KVUsage} {
		s.SetGauge(g, 0.5)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		smp := s
		smp.Time = s.Time.Add(time.Duration(i) * time.Second)
		for c := range sample.NumCounters {
			if smp.HasCounter[c] {
				smp.Counter[c] += 100 * float64(i)
			}
		}
		if out := der.Derive(smp); !out.HasCounter[sample.GenerationTokens] {
			b.Fatal("counter dropped")
		}
	}
}

// s1Page is the vLLM page of bench's S1 scenario: a V1 page with the six
// latency histograms tpsmon reads (20 buckets each, as vLLM prints them)
// and four it skips, and Python's own series.
func s1Page(b *testing.B) []byte {
	page := readFixture(b, "v1_two_engines.prom")
	var extra strings.Builder
	real := []string{"time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
		"request_time_per_output_token_seconds", "request_prefill_time_seconds", "request_decode_time_seconds"}
	for i := range 10 {
		name := fmt.Sprintf("vllm:request_histogram_%d_seconds", i)
		if i < len(real) {
			name = "vllm:" + real[i]
		}
		fmt.Fprintf(&extra, "# HELP %s Histogram %d.\n# TYPE %s histogram\n", name, i, name)
		for _, le := range []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"} {
			fmt.Fprintf(&extra, "%s_bucket{le=%q,model_name=\"m\"} %d\n", name, le, 100*i)
		}
		fmt.Fprintf(&extra, "%s_sum{model_name=\"m\"} %d.5\n%s_count{model_name=\"m\"} %d\n", name, 9*i, name, 100*i)
	}
	for g := range 3 {
		fmt.Fprintf(&extra, "python_gc_objects_collected_total{generation=\"%d\"} %d.0\n", g, 1000*g)
	}
	return []byte(page + extra.String())
}

// BenchmarkHistogramPages is a live scrape's read of a page with latency
// histograms, after the first: the filtered parse with the server's series
// cache, and the counters, gauges and histograms taken from it. The pages
// are the fixtures with histograms (SGLang, NIM, vLLM V1) and S1's vLLM one.
func BenchmarkHistogramPages(b *testing.B) {
	pages := []struct {
		name string
		body []byte
	}{{"s1_vllm", s1Page(b)}}
	for _, f := range []string{"metrics_docs_v0.4_era.prom", "nim_llm_metrics_datadog_fixture.prom", "v1_metrics_design_doc.prom"} {
		pages = append(pages, struct {
			name string
			body []byte
		}{strings.TrimSuffix(f, ".prom"), []byte(readFixture(b, f))})
	}
	for _, pg := range pages {
		// Between the windows' edges a scraper leaves the histograms
		// unread (Scraper.Window): hists_unread is those pages' read.
		for _, unread := range []bool{false, true} {
			name := pg.name
			if unread {
				name += "/hists_unread"
			}
			b.Run(name, func(b *testing.B) {
				var cache seriesCache
				smp, d, err := readPage(pg.body, nil, &cache)
				if err != nil {
					b.Fatal(err)
				}
				if !slices.Contains(smp.HasHist[:], true) {
					b.Fatal("no histogram read")
				}
				if unread {
					cache = seriesCache{unhist: true}
					if smp, _, err = readPage(pg.body, d, &cache); err != nil || slices.Contains(smp.HasHist[:], true) {
						b.Fatalf("histograms left unread: %v read, err %v", smp.HasHist, err)
					}
				}
				b.SetBytes(int64(len(pg.body)))
				b.ReportAllocs()
				// CPU time as well as wall time: on a shared machine the
				// first moves less with the neighbours' load.
				start := cpuclock.Self()
				for b.Loop() {
					if _, _, err := readPage(pg.body, d, &cache); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cpuclock.Self()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
