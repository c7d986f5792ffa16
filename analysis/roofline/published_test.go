package roofline

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

type publishedCase struct {
	Name, Source, URL, Engine, Model, GPU string
	PeakBWGBps                            float64 `json:"peak_bw_gbps"`
	Params                                float64
	EmbedParams                           float64 `json:"embed_params"`
	ReplicatedParams                      float64 `json:"replicated_params"`
	BytesPerWeight                        float64 `json:"bytes_per_weight"`
	WeightBytes                           float64 `json:"weight_bytes"`
	Layers                                int
	KVHeads                               int `json:"kv_heads"`
	HeadDim                               int `json:"head_dim"`
	TP                                    int
	Batch, Context                        float64
	MeasuredTPS                           float64 `json:"measured_tps"`
	StatedBWGBps                          float64 `json:"stated_bw_gbps"`
	CountsEmbedding                       bool    `json:"counts_embedding"`
	ExpectAboveOne                        bool    `json:"expect_above_one"`
	ExpectWarning                         string  `json:"expect_warning"`
}

// TestPublishedMeasurements sets published decode measurements (testdata/
// published.json, each with its source) against the model: where a
// source states its achieved bandwidth the computed one must agree within
// the file's tolerance, and every MBU must be plausible, in (0, 1], but
// for the case known to hide speculative decoding, which must exceed 1
// and say why.
func TestPublishedMeasurements(t *testing.T) {
	b, err := os.ReadFile("testdata/published.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Tolerance struct {
			BandwidthRel float64 `json:"bandwidth_rel"`
			MBUAbs       float64 `json:"mbu_abs"`
		}
		Cases []publishedCase
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 15 {
		t.Fatalf("%d cases, want at least 15", len(file.Cases))
	}
	for _, c := range file.Cases {
		if c.Source == "" || c.URL == "" || c.MeasuredTPS <= 0 {
			t.Errorf("%s: no source or measurement", c.Name)
			continue
		}
		g := GPU{PeakBWGBps: c.PeakBWGBps, Name: "custom"}
		if c.GPU != "" {
			s, err := Lookup(c.GPU)
			if err != nil {
				t.Errorf("%s: %v", c.Name, err)
				continue
			}
			g = s.GPU(c.BytesPerWeight)
		}
		m := Model{Params: c.Params, EmbedParams: c.EmbedParams, ReplicatedParams: c.ReplicatedParams, BytesPerWeight: c.BytesPerWeight,
			WeightBytes: c.WeightBytes, Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, KVBytes: 2}
		u, err := Measure(m, g, Load{TP: c.TP, Batch: c.Batch, Context: c.Context, TokensPerStep: 1}, c.MeasuredTPS)
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		line := "computed MBU " + f3(u.MBU) + ", ceiling " + f3(u.PerUserTPS) + " tok/s"
		if c.StatedBWGBps > 0 {
			ours := u.Bytes * c.MeasuredTPS / 1e9
			if c.CountsEmbedding {
				ours += c.EmbedParams * 2 * c.MeasuredTPS / 1e9 // the source's bytes: its bf16 embedding too
			}
			stated := c.StatedBWGBps / g.PeakBWGBps
			line += "; bandwidth " + f3(ours) + " vs stated " + f3(c.StatedBWGBps) + " GB/s, MBU(source's bytes) " + f3(ours/g.PeakBWGBps) + " vs stated " + f3(stated)
			if math.Abs(ours-c.StatedBWGBps) > file.Tolerance.BandwidthRel*c.StatedBWGBps || math.Abs(ours/g.PeakBWGBps-stated) > file.Tolerance.MBUAbs {
				t.Errorf("%s: %s", c.Name, line)
			}
		}
		if c.ExpectAboveOne {
			if u.MBU <= 1 || !strings.Contains(strings.Join(u.Warnings, "|"), c.ExpectWarning) {
				t.Errorf("%s: MBU %g warnings %v, want above 1 naming %q", c.Name, u.MBU, u.Warnings, c.ExpectWarning)
			}
		} else if u.MBU <= 0 || u.MBU > 1 || u.PerUserTPS < c.MeasuredTPS {
			t.Errorf("%s: %s: not in (0, 1] or the measurement above the ceiling", c.Name, line)
		}
		t.Logf("%-70s %s", c.Name, line)
	}
}

func f3(v float64) string {
	b, _ := json.Marshal(math.Round(v*1000) / 1000)
	return string(b)
}
