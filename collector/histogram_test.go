package collector

import (
	"math"
	"testing"

	"github.com/tpsmon/tpsmon/sample"
)

// TestHistogramsOnFixtures reads the latency histograms of real and
// documented pages, through the filtered parse (dialect known) and the
// full one (detected): both give the same buckets.
func TestHistogramsOnFixtures(t *testing.T) {
	type want struct {
		n     int     // edges, +Inf included
		le    float64 // one edge
		count float64 // its cumulative count
		total float64 // the +Inf bucket
	}
	for _, tc := range []struct {
		file string
		d    *Dialect
		want map[sample.Hist]want
		none []sample.Hist
	}{
		// The design doc's excerpt stops at 0.1 s: its count is the +Inf bucket.
		{"v1_metrics_design_doc.prom", &VLLM, map[sample.Hist]want{sample.HistTTFT: {9, 0.04, 97, 140}}, []sample.Hist{sample.HistITL, sample.HistE2E, sample.HistQueue}},
		{"metrics_docs_v0.4_era.prom", &SGLang, map[sample.Hist]want{
			sample.HistTTFT: {21, 2.5, 140, 11008},
			// the old per-gap name, before inter_token_latency_seconds
			sample.HistITL: {0, 0.04, 1815, 0},
			sample.HistE2E: {0, 0.5, 6, 11228},
		}, []sample.Hist{sample.HistTPOT}},
		{"nim_llm_metrics_datadog_fixture.prom", &NIM, map[sample.Hist]want{sample.HistTTFT: {0, 0.02, 2, 0}}, nil},
		// llama.cpp has no latency histograms.
		{"metrics_2025_06_no_kv.prom", &LlamaCPP, nil, []sample.Hist{sample.HistTTFT, sample.HistITL, sample.HistTPOT, sample.HistE2E, sample.HistQueue}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			page := []byte(readFixture(t, tc.file))
			filtered, _, err := ReadPage(page, tc.d)
			if err != nil {
				t.Fatal(err)
			}
			detected, d, err := ReadPage(page, nil)
			if err != nil || d != tc.d {
				t.Fatalf("detected %v, %v", d, err)
			}
			for _, s := range []sample.Server{filtered, detected} {
				for h, w := range tc.want {
					if !s.HasHist[h] {
						t.Fatalf("no %s histogram", h)
					}
					bs := s.Hists[h].Buckets
					if w.n > 0 && len(bs) != w.n {
						t.Errorf("%s: %d edges, want %d", h, len(bs), w.n)
					}
					if last := bs[len(bs)-1]; !math.IsInf(last.Le, 1) || w.total > 0 && last.Count != w.total {
						t.Errorf("%s: last bucket %+v, want +Inf of %g", h, last, w.total)
					}
					found := false
					for _, b := range bs {
						if b.Le == w.le {
							found = b.Count == w.count
						}
					}
					if !found {
						t.Errorf("%s: no le %g of %g in %+v", h, w.le, w.count, bs)
					}
				}
				for _, h := range tc.none {
					if s.HasHist[h] {
						t.Errorf("%s histogram read from a page without it", h)
					}
				}
			}
		})
	}
}

// TestHistogramSums: data-parallel engines are one server, their buckets
// summed by edge; tensor-parallel ranks see one batch, rank 0 alone is
// read; label sets whose edges disagree make no histogram.
func TestHistogramSums(t *testing.T) {
	const dp = `vllm:generation_tokens_total{engine="0"} 1
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{engine="0",le="1"} 3
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 4
vllm:time_to_first_token_seconds_sum{engine="0"} 2.5
vllm:time_to_first_token_seconds_count{engine="0"} 4
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{engine="1",le="1"} 2
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 5
vllm:time_to_first_token_seconds_sum{engine="1"} 10
vllm:time_to_first_token_seconds_count{engine="1"} 5
`
	s, _, err := ReadPage([]byte(dp), &VLLM)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Hists[sample.HistTTFT]
	if !s.HasHist[sample.HistTTFT] || len(h.Buckets) != 3 || h.Buckets[0].Count != 3 || h.Buckets[1].Count != 5 || h.Buckets[2].Count != 9 || h.Sum != 12.5 {
		t.Fatalf("summed engines: %+v", h)
	}
	const tp = `sglang:num_running_reqs{tp_rank="0"} 1
sglang:num_running_reqs{tp_rank="1"} 1
sglang:time_to_first_token_seconds_bucket{tp_rank="0",le="1"} 2
sglang:time_to_first_token_seconds_bucket{tp_rank="0",le="+Inf"} 3
sglang:time_to_first_token_seconds_bucket{tp_rank="1",le="1"} 2
sglang:time_to_first_token_seconds_bucket{tp_rank="1",le="+Inf"} 3
`
	s, _, err = ReadPage([]byte(tp), &SGLang)
	if err != nil {
		t.Fatal(err)
	}
	if h := s.Hists[sample.HistTTFT]; len(h.Buckets) != 2 || h.Buckets[1].Count != 3 || !math.IsNaN(h.Sum) {
		t.Fatalf("tensor-parallel ranks: %+v", h)
	}
	const mismatched = `vllm:generation_tokens_total{engine="0"} 1
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 4
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.2"} 2
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 5
`
	if s, _, _ = ReadPage([]byte(mismatched), &VLLM); s.HasHist[sample.HistTTFT] {
		t.Fatalf("engines with different edges summed: %+v", s.Hists[sample.HistTTFT])
	}
	const noInf = `vllm:generation_tokens_total 1
vllm:time_to_first_token_seconds_bucket{le="0.1"} 1
`
	if s, _, _ = ReadPage([]byte(noInf), &VLLM); s.HasHist[sample.HistTTFT] {
		t.Fatalf("a histogram without +Inf bucket or count read: %+v", s.Hists[sample.HistTTFT])
	}
}
