package collector

import (
	"bytes"
	"testing"
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
