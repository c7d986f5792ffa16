package roofline

import (
	"errors"
	"strings"
	"testing"
)

func TestLookupLooseNames(t *testing.T) {
	cases := []struct{ in, want string }{
		{"A100-SXM4-80GB", "A100 SXM4 80GB"},
		{"NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"},
		{"NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"},
		{"NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"},
		{"NVIDIA H100 80GB HBM3", "H100 SXM"},
		{"h100 pcie", "H100 PCIe"},
		{"H100-SXM5", "H100 SXM"},
		{"NVIDIA H100 NVL", "H100 NVL"},
		{"NVIDIA H200", "H200 SXM"},
		{"NVIDIA H200 NVL", "H200 NVL"},
		{"NVIDIA H20", "H20"},
		{"NVIDIA GH200 480GB", "GH200 96GB"},
		{"NVIDIA GH200 144G HBM3e", "GH200 144GB"},
		{"NVIDIA B200", "B200"},
		{"RTX-3090Ti", "RTX 3090 Ti"},
		{"NVIDIA GeForce RTX 3090", "RTX 3090"},
		{"geforce rtx 4090", "RTX 4090"},
		{"NVIDIA RTX A6000", "RTX A6000"},
		{"NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"},
		{"L40S", "L40S"},
		{"NVIDIA L40", "L40"},
		{"NVIDIA L4", "L4"},
		{"A10G", "A10G"},
		{"NVIDIA A10", "A10"},
		{"Tesla V100-SXM2-32GB", "V100 SXM2"},
		{"Tesla V100-PCIE-16GB", "V100 PCIe"},
		{"Tesla V100S-PCIE-32GB", "V100S PCIe"},
		{"Tesla T4", "T4"},
		{"NVIDIA A30", "A30"},
		{"NVIDIA A40", "A40"},
		{"l40s pcie 48gb", "L40S"},
	}
	for _, c := range cases {
		s, err := Lookup(c.in)
		if err != nil {
			t.Errorf("Lookup(%q): %v", c.in, err)
			continue
		}
		if s.Name != c.want {
			t.Errorf("Lookup(%q) = %s, want %s", c.in, s.Name, c.want)
		}
	}
}

func TestLookupRefuses(t *testing.T) {
	cases := []struct {
		in   string
		want error
		says []string
	}{
		{"H100", ErrAmbiguousGPU, []string{"H100 SXM", "H100 PCIe", "H100 NVL"}},
		{"a100", ErrAmbiguousGPU, []string{"A100 SXM4 80GB", "A100 PCIe 40GB"}},
		{"A100 80GB", ErrAmbiguousGPU, []string{"A100 SXM4 80GB", "A100 PCIe 80GB"}},
		{"V100", ErrAmbiguousGPU, []string{"V100 SXM2", "V100 PCIe"}},
		{"GH200", ErrAmbiguousGPU, []string{"GH200 96GB", "GH200 144GB"}},
		{"H100 PCIe 94GB", ErrUnknownGPU, []string{"H100 NVL"}},
		{"MI300X", ErrUnknownGPU, []string{"--peak-bw-gbps"}},
		{"NVIDIA", ErrUnknownGPU, []string{"no GPU model"}},
		{"", ErrUnknownGPU, nil},
		{"RTX 6000", ErrUnknownGPU, nil}, // Turing Quadro RTX 6000 is not the Ada part
	}
	for _, c := range cases {
		s, err := Lookup(c.in)
		if !errors.Is(err, c.want) {
			t.Errorf("Lookup(%q) = %v, %v; want %v", c.in, s.Name, err, c.want)
			continue
		}
		for _, w := range c.says {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Lookup(%q): %q does not name %q", c.in, err, w)
			}
		}
	}
}

// Candidates with the same figures are not ambiguous: both V100 SXM2
// sizes are one row, and a name matching rows that differ only in
// unrelated fields would be taken.
func TestLookupSameFiguresAccepted(t *testing.T) {
	if !sameFigures([]Spec{{BWGBps: 1, BF16: 2}, {Name: "other", BWGBps: 1, BF16: 2}}) {
		t.Fatal("equal figures are not the same")
	}
	if sameFigures([]Spec{{BWGBps: 1}, {BWGBps: 2}}) {
		t.Fatal("different bandwidths are the same")
	}
	s, err := Lookup("V100 SXM2 16GB")
	if err != nil || s.Name != "V100 SXM2" {
		t.Fatalf("V100 SXM2 16GB: %v %v", s.Name, err)
	}
}

// Every row is sourced and dense: no sparse headline, SXM and PCIe apart.
func TestTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Table {
		if seen[s.Name] {
			t.Errorf("%s twice", s.Name)
		}
		seen[s.Name] = true
		if s.Source == "" || s.BWGBps <= 0 || len(s.Ident) == 0 || len(s.MemGB) == 0 {
			t.Errorf("%s: incomplete row %+v", s.Name, s)
		}
		if s.FP8 > 0 && s.BF16 > 0 && s.FP8 > 2.05*s.BF16 {
			t.Errorf("%s: FP8 %g more than twice BF16 %g: a sparse figure?", s.Name, s.FP8, s.BF16)
		}
	}
	get := func(n string) Spec {
		for _, s := range Table {
			if s.Name == n {
				return s
			}
		}
		t.Fatalf("no %s", n)
		return Spec{}
	}
	if get("H100 SXM").BF16 != 989 || get("H100 SXM").BWGBps != 3350 || get("H100 PCIe").BWGBps != 2000 {
		t.Error("H100 figures")
	}
	if get("A100 SXM4 80GB").BWGBps != 2039 || get("A100 PCIe 80GB").BWGBps != 1935 {
		t.Error("A100 80GB figures")
	}
}

func TestSpecTFLOPSPrecision(t *testing.T) {
	h, _ := Lookup("H100 SXM")
	if got := h.TFLOPS(1); got != 1979 {
		t.Errorf("FP8 weights: %g", got)
	}
	if got := h.TFLOPS(2); got != 989 {
		t.Errorf("BF16 weights: %g", got)
	}
	if got := h.TFLOPS(0.5625); got != 989 {
		t.Errorf("Q4_0 weights: %g", got)
	}
	v, _ := Lookup("V100 PCIe")
	if got := v.TFLOPS(2); got != 112 {
		t.Errorf("V100 without BF16: %g", got)
	}
	a, _ := Lookup("A10G")
	if a.GPU(2).PeakTFLOPS != 0 {
		t.Error("A10G has no public tensor figure")
	}
}

func TestPeakTableWinsOverNVML(t *testing.T) {
	// H100 SXM: 5120 bits × 2619 MHz × 2 = 3352 GB/s, within 5 % of 3350.
	g, note, err := Peak("NVIDIA H100 80GB HBM3", 3352.32, 2)
	if err != nil || g.PeakBWGBps != 3350 || note != "" || g.PeakTFLOPS != 989 {
		t.Fatalf("%+v %q %v", g, note, err)
	}
	// 10 % apart: the table wins, noted.
	g, note, err = Peak("NVIDIA A100-SXM4-80GB", 1800, 2)
	if err != nil || g.PeakBWGBps != 2039 || !strings.Contains(note, "using the table") || !strings.Contains(note, "1800") {
		t.Fatalf("%+v %q %v", g, note, err)
	}
	// 4.9 % apart: no note.
	if _, note, _ := Peak("NVIDIA A100-SXM4-80GB", 2039*0.951, 2); note != "" {
		t.Errorf("within 5 %%: %q", note)
	}
	// Not in the table: NVML's figure, no TFLOPS, said.
	g, note, err = Peak("NVIDIA RTX PRO 6000 Blackwell", 1792, 2)
	if err != nil || g.PeakBWGBps != 1792 || g.PeakTFLOPS != 0 || !strings.Contains(note, "not in the table") {
		t.Fatalf("%+v %q %v", g, note, err)
	}
	if _, _, err := Peak("NVIDIA RTX PRO 6000 Blackwell", 0, 2); !errors.Is(err, ErrNoPeak) {
		t.Errorf("nothing known: %v", err)
	}
	if _, _, err := Peak("A100", 2000, 2); !errors.Is(err, ErrAmbiguousGPU) {
		t.Errorf("ambiguous: %v", err)
	}
}
