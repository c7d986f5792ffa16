package roofline

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Spec is one row of the built-in GPU table: datasheet figures, per GPU.
// TFLOPS are dense (the datasheets headline 2:4 sparse figures, twice
// these); 0 means the part has no such tensor math, or no public figure.
// GeForce parts are given with FP32 accumulate (what BF16/FP16 inference
// kernels use), half their FP16-accumulate figure.
type Spec struct {
	Name   string // what tpsmon calls it
	Ident  []string
	Form   string // "sxm", "pcie", "nvl"; "" when the part comes in one form
	MemGB  []int  // memory sizes (tokens) that name this row
	Hints  []string
	BWGBps float64
	BF16   float64
	FP16   float64
	FP8    float64
	Source string
}

// TFLOPS returns the dense peak for weights of bytesPerWeight bytes: FP8
// math for 1-byte weights where the part has it, else BF16 (FP16 on parts
// without BF16). Quantized integer weights are dequantized to 16-bit math
// by the common kernels.
func (s Spec) TFLOPS(bytesPerWeight float64) float64 {
	if bytesPerWeight > 0 && bytesPerWeight <= 1.01 && bytesPerWeight >= 0.99 && s.FP8 > 0 {
		return s.FP8
	}
	if s.BF16 > 0 {
		return s.BF16
	}
	return s.FP16
}

// GPU returns the row as a GPU for weights of bytesPerWeight bytes.
func (s Spec) GPU(bytesPerWeight float64) GPU {
	return GPU{Name: s.Name, PeakBWGBps: s.BWGBps, PeakTFLOPS: s.TFLOPS(bytesPerWeight), Source: s.Source}
}

// Datasheet names, as NVIDIA titles them.
const (
	dsV100   = "NVIDIA Tesla V100 GPU datasheet"
	dsV100S  = "NVIDIA V100S datasheet"
	dsT4     = "NVIDIA T4 Tensor Core GPU datasheet"
	dsA100   = "NVIDIA A100 Tensor Core GPU datasheet"
	dsA10    = "NVIDIA A10 Tensor Core GPU datasheet"
	dsA10G   = "AWS EC2 G5 instance specifications (A10G: 24 GB GDDR6, 600 GB/s; NVIDIA publishes no A10G tensor figure)"
	dsA30    = "NVIDIA A30 Tensor Core GPU datasheet"
	dsA40    = "NVIDIA A40 datasheet"
	dsL4     = "NVIDIA L4 Tensor Core GPU datasheet"
	dsL40    = "NVIDIA L40 GPU datasheet"
	dsL40S   = "NVIDIA L40S GPU datasheet"
	dsH100   = "NVIDIA H100 Tensor Core GPU datasheet"
	dsH200   = "NVIDIA H200 Tensor Core GPU datasheet"
	dsH20    = "NVIDIA H20 product specifications (96 GB HBM3, 4.0 TB/s; FP16 148, FP8 296 TFLOPS dense)"
	dsGH200  = "NVIDIA GH200 Grace Hopper Superchip datasheet"
	dsB200   = "NVIDIA HGX B200 datasheet (per GPU; 4.5 PF BF16 and 9 PF FP8 with sparsity)"
	dsGA102  = "NVIDIA Ampere GA102 GPU architecture whitepaper"
	dsAda    = "NVIDIA Ada GPU architecture whitepaper"
	dsA6000  = "NVIDIA RTX A6000 datasheet"
	dsRTX6kA = "NVIDIA RTX 6000 Ada Generation datasheet"
)

// Table is the built-in GPU table.
var Table = []Spec{
	{Name: "V100 SXM2", Ident: []string{"v100"}, Form: "sxm", MemGB: []int{16, 32}, BWGBps: 900, FP16: 125, Source: dsV100},
	{Name: "V100 PCIe", Ident: []string{"v100"}, Form: "pcie", MemGB: []int{16, 32}, BWGBps: 900, FP16: 112, Source: dsV100},
	{Name: "V100S PCIe", Ident: []string{"v100s"}, Form: "pcie", MemGB: []int{32}, BWGBps: 1134, FP16: 130, Source: dsV100S},
	{Name: "T4", Ident: []string{"t4"}, MemGB: []int{16}, BWGBps: 320, FP16: 65, Source: dsT4},
	{Name: "A100 SXM4 40GB", Ident: []string{"a100"}, Form: "sxm", MemGB: []int{40}, BWGBps: 1555, BF16: 312, FP16: 312, Source: dsA100},
	{Name: "A100 SXM4 80GB", Ident: []string{"a100"}, Form: "sxm", MemGB: []int{80}, BWGBps: 2039, BF16: 312, FP16: 312, Source: dsA100},
	{Name: "A100 PCIe 40GB", Ident: []string{"a100"}, Form: "pcie", MemGB: []int{40}, BWGBps: 1555, BF16: 312, FP16: 312, Source: dsA100},
	{Name: "A100 PCIe 80GB", Ident: []string{"a100"}, Form: "pcie", MemGB: []int{80}, BWGBps: 1935, BF16: 312, FP16: 312, Source: dsA100},
	{Name: "A10", Ident: []string{"a10"}, MemGB: []int{24}, BWGBps: 600, BF16: 125, FP16: 125, Source: dsA10},
	{Name: "A10G", Ident: []string{"a10g"}, MemGB: []int{24}, BWGBps: 600, Source: dsA10G},
	{Name: "A30", Ident: []string{"a30"}, MemGB: []int{24}, BWGBps: 933, BF16: 165, FP16: 165, Source: dsA30},
	{Name: "A40", Ident: []string{"a40"}, MemGB: []int{48}, BWGBps: 696, BF16: 149.7, FP16: 149.7, Source: dsA40},
	{Name: "L4", Ident: []string{"l4"}, MemGB: []int{24}, BWGBps: 300, BF16: 121, FP16: 121, FP8: 242.5, Source: dsL4},
	{Name: "L40", Ident: []string{"l40"}, MemGB: []int{48}, BWGBps: 864, BF16: 181, FP16: 181, FP8: 362, Source: dsL40},
	{Name: "L40S", Ident: []string{"l40s"}, MemGB: []int{48}, BWGBps: 864, BF16: 362.05, FP16: 362.05, FP8: 733, Source: dsL40S},
	{Name: "H100 SXM", Ident: []string{"h100"}, Form: "sxm", MemGB: []int{80}, Hints: []string{"hbm3"}, BWGBps: 3350, BF16: 989, FP16: 989, FP8: 1979, Source: dsH100},
	{Name: "H100 PCIe", Ident: []string{"h100"}, Form: "pcie", MemGB: []int{80}, Hints: []string{"hbm2e"}, BWGBps: 2000, BF16: 756, FP16: 756, FP8: 1513, Source: dsH100},
	{Name: "H100 NVL", Ident: []string{"h100"}, Form: "nvl", MemGB: []int{94}, BWGBps: 3900, BF16: 835, FP16: 835, FP8: 1670, Source: dsH100},
	{Name: "H200 SXM", Ident: []string{"h200"}, Form: "sxm", MemGB: []int{141}, Hints: []string{"plain"}, BWGBps: 4800, BF16: 989, FP16: 989, FP8: 1979, Source: dsH200},
	{Name: "H200 NVL", Ident: []string{"h200"}, Form: "nvl", MemGB: []int{141}, BWGBps: 4800, BF16: 835, FP16: 835, FP8: 1670, Source: dsH200},
	{Name: "H20", Ident: []string{"h20"}, MemGB: []int{96}, BWGBps: 4000, BF16: 148, FP16: 148, FP8: 296, Source: dsH20},
	{Name: "GH200 96GB", Ident: []string{"gh200"}, MemGB: []int{96, 480}, Hints: []string{"hbm3"}, BWGBps: 4000, BF16: 989, FP16: 989, FP8: 1979, Source: dsGH200},
	{Name: "GH200 144GB", Ident: []string{"gh200"}, MemGB: []int{144, 624}, Hints: []string{"hbm3e"}, BWGBps: 4900, BF16: 989, FP16: 989, FP8: 1979, Source: dsGH200},
	{Name: "B200", Ident: []string{"b200"}, Form: "sxm", MemGB: []int{180, 192}, BWGBps: 7700, BF16: 2250, FP16: 2250, FP8: 4500, Source: dsB200},
	{Name: "RTX 3090", Ident: []string{"3090"}, MemGB: []int{24}, BWGBps: 936, BF16: 71, FP16: 71, Source: dsGA102},
	{Name: "RTX 3090 Ti", Ident: []string{"3090", "ti"}, MemGB: []int{24}, BWGBps: 1008, BF16: 80, FP16: 80, Source: dsGA102},
	{Name: "RTX 4090", Ident: []string{"4090"}, MemGB: []int{24}, BWGBps: 1008, BF16: 165.2, FP16: 165.2, FP8: 330.3, Source: dsAda},
	{Name: "RTX A6000", Ident: []string{"a6000"}, MemGB: []int{48}, BWGBps: 768, BF16: 154.8, FP16: 154.8, Source: dsA6000},
	{Name: "RTX 6000 Ada", Ident: []string{"6000", "ada"}, MemGB: []int{48}, BWGBps: 960, BF16: 364.2, FP16: 364.2, FP8: 728.5, Source: dsRTX6kA},
}

// ErrUnknownGPU and ErrAmbiguousGPU are Lookup's refusals.
var (
	ErrUnknownGPU   = errors.New("GPU not in the built-in table")
	ErrAmbiguousGPU = errors.New("GPU name is ambiguous")
)

// noise are words of a GPU's name that say nothing of its figures.
var noise = map[string]bool{"nvidia": true, "geforce": true, "tesla": true, "quadro": true, "rtx": true,
	"generation": true, "gpu": true, "tensor": true, "core": true, "gddr6": true, "gddr6x": true}

var formToken = map[string]string{"sxm": "sxm", "sxm2": "sxm", "sxm4": "sxm", "sxm5": "sxm", "pcie": "pcie", "nvl": "nvl"}

// digitsThen splits t into a leading run of digits and the rest.
func digitsThen(t string) (digits, rest string) {
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	return t[:i], t[i:]
}

type parsed struct {
	ident []string
	form  string
	mem   int
	hints []string
}

func parseName(name string) parsed {
	var p parsed
	notAlnum := func(r rune) bool { return (r < 'a' || r > 'z') && (r < '0' || r > '9') }
	for _, t := range strings.FieldsFunc(strings.ToLower(name), notAlnum) {
		if noise[t] {
			continue
		}
		d, rest := digitsThen(t)
		if len(d) == 4 && rest == "ti" { // 3090Ti
			p.ident = append(p.ident, d, "ti")
			continue
		}
		if d != "" && (rest == "g" || rest == "gb") { // 80GB, 144G
			p.mem, _ = strconv.Atoi(d)
			continue
		}
		if f, ok := formToken[t]; ok {
			p.form = f
			continue
		}
		if t == "hbm3" || t == "hbm3e" || t == "hbm2e" || t == "hbm2" {
			p.hints = append(p.hints, t)
			continue
		}
		p.ident = append(p.ident, t)
	}
	sort.Strings(p.ident)
	return p
}

func sameIdent(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	b = append([]string(nil), b...)
	sort.Strings(b)
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func contains[T comparable](xs []T, x T) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Lookup finds a GPU by name, matched loosely: case, spaces, hyphens and
// underscores, an NVIDIA/GeForce/Tesla/RTX prefix, form-factor tokens
// (SXM2/4/5, PCIe, NVL) and memory tokens (80GB, 144G) are understood
// ("A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "h100 pcie", "RTX-3090Ti").
// A name that fits several rows is refused with them, unless they share
// the same figures. A name without a form token is the part NVML names
// that way where one does ("NVIDIA H200" is the SXM part; "H200 NVL" the
// NVL).
func Lookup(name string) (Spec, error) {
	p := parseName(name)
	if len(p.ident) == 0 {
		return Spec{}, fmt.Errorf("%w: %q names no GPU model", ErrUnknownGPU, name)
	}
	var cands []Spec
	for _, s := range Table {
		if sameIdent(p.ident, s.Ident) {
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		return Spec{}, fmt.Errorf("%w: %q (give --peak-bw-gbps and --peak-tflops)", ErrUnknownGPU, name)
	}
	all := cands
	filter := func(keep func(Spec) bool) {
		var out []Spec
		for _, s := range cands {
			if keep(s) {
				out = append(out, s)
			}
		}
		cands = out
	}
	if p.form != "" {
		filter(func(s Spec) bool { return s.Form == "" || s.Form == p.form })
	}
	if p.mem != 0 {
		filter(func(s Spec) bool { return contains(s.MemGB, p.mem) })
	}
	for _, h := range p.hints {
		var any bool
		for _, s := range cands {
			any = any || contains(s.Hints, h)
		}
		if any {
			filter(func(s Spec) bool { return contains(s.Hints, h) })
		}
	}
	if len(cands) > 1 && p.form == "" && p.mem == 0 && len(p.hints) == 0 {
		var plain []Spec
		for _, s := range cands {
			if contains(s.Hints, "plain") {
				plain = append(plain, s)
			}
		}
		if len(plain) == 1 {
			cands = plain
		}
	}
	switch {
	case len(cands) == 0:
		return Spec{}, fmt.Errorf("%w: %q: no %s of that form or memory; the table has %s", ErrUnknownGPU, name, strings.ToUpper(strings.Join(p.ident, " ")), names(all))
	case len(cands) == 1 || sameFigures(cands):
		return cands[0], nil
	}
	return Spec{}, fmt.Errorf("%w: %q could be %s (say which, e.g. with SXM/PCIe/NVL or the memory size)", ErrAmbiguousGPU, name, names(cands))
}

func sameFigures(ss []Spec) bool {
	for _, s := range ss[1:] {
		if s.BWGBps != ss[0].BWGBps || s.BF16 != ss[0].BF16 || s.FP16 != ss[0].FP16 || s.FP8 != ss[0].FP8 {
			return false
		}
	}
	return true
}

func names(ss []Spec) string {
	n := make([]string, len(ss))
	for i, s := range ss {
		n[i] = s.Name
	}
	return strings.Join(n, ", ")
}

// ErrNoPeak means neither the table nor the driver gives a GPU's peak.
var ErrNoPeak = errors.New("no peak bandwidth")

// Disagree is how far NVML's bandwidth (bus width × memory clock) may be
// from the table's before Peak notes it: memory clocks are reported per
// part and driver, and a part running its memory below the datasheet's
// (or a table row for the wrong form) shows here.
const Disagree = 0.05

// Peak returns the peaks of a GPU NVML names name, whose bus width ×
// memory clock gives nvmlGBps (0: unknown). The table wins where it has
// the part, with a note when NVML's figure is more than Disagree apart;
// a part not in the table takes NVML's bandwidth and no TFLOPS (the
// compute bound is then not checked). An ambiguous name is an error.
func Peak(name string, nvmlGBps, bytesPerWeight float64) (GPU, string, error) {
	s, err := Lookup(name)
	switch {
	case err == nil:
		g := s.GPU(bytesPerWeight)
		if nvmlGBps > 0 && math.Abs(nvmlGBps-s.BWGBps) > Disagree*s.BWGBps {
			return g, fmt.Sprintf("GPU %q: NVML's bus width × memory clock gives %.0f GB/s, the table's %s %.0f GB/s (%s); using the table", name, nvmlGBps, s.Name, s.BWGBps, s.Source), nil
		}
		return g, "", nil
	case errors.Is(err, ErrUnknownGPU) && nvmlGBps > 0:
		return GPU{Name: name, PeakBWGBps: nvmlGBps, Source: "NVML bus width × max memory clock"},
			fmt.Sprintf("GPU %q is not in the table: peak bandwidth %.0f GB/s from NVML, no TFLOPS", name, nvmlGBps), nil
	case errors.Is(err, ErrUnknownGPU):
		return GPU{}, "", fmt.Errorf("%w for GPU %q: not in the table and NVML gave no bus width or memory clock", ErrNoPeak, name)
	}
	return GPU{}, "", err
}
