package collector

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
