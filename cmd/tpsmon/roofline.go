package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/analysis/modelfile"
	"github.com/tpsmon/tpsmon/analysis/roofline"
)

type rooflineOpts struct {
	paramsB, bytesPerWeight, activeB, embedB float64
	replicatedB                              float64
	layers, kvHeads, headDim                 int
	kvBytes                                  float64
	kvReplicated                             bool
	experts, expertsUsed                     int
	gpu                                      string
	peakBW, peakTFLOPS                       float64
	tp                                       int
	batch, context                           float64
	perUserTPS                               float64
	tpot                                     string
	speculative                              float64
	modelConfig, modelFile                   string
	format                                   string
}

func newRooflineCmd() *cobra.Command {
	var o rooflineOpts
	cmd := &cobra.Command{
		Use:   "roofline",
		Short: "The decode ceiling of a model on a GPU, and a measured rate's bandwidth utilization (MBU)",
		Long: `roofline computes what the hardware could give at a batch and context: every
decode step reads the weights once (over --tp GPUs) plus the KV cache of every
running sequence, so per GPU

  bytes/step = weight bytes / tp + batch × context × kv bytes per token / tp
  kv bytes per token = 2 × layers × kv heads × head dim × kv bytes

and the step takes the longer of bytes / peak bandwidth and FLOPs (2 × active
params × batch) / peak TFLOPS. With a measured --per-user-tps (or --tpot) it
prints MBU = bytes/step × measured steps/s / peak bandwidth: never clamped,
above 1 with a warning naming the likely wrong fact.

A mixture of experts reads only the experts its tokens touch: with --experts E
and --experts-used k, E × (1 − (1 − k/E)^(batch × tokens per step)) per layer,
the active parameters at batch 1, nearly all at large batch. --speculative N
says each step gives each sequence N tokens on average (tokens/s ≠ steps/s).
The input embedding (--embed-params-b) is gathered, not streamed; KV heads are
split over tp but a GPU holds at least one (--kv-replicated: every GPU reads
the whole KV, as with MLA).

Facts come from --model-config (config.json), --model-file (GGUF, safetensors,
a safetensors index, or a model directory: real bytes from the headers) and the
flags, a flag winning. The GPU comes from --gpu (the built-in table: NVIDIA
datasheet figures, dense TFLOPS) or --peak-bw-gbps and --peak-tflops.`,
		Example: `  tpsmon roofline --params-b 8 --gpu "H100 SXM" --batch 16 --context 2048 --layers 32 --kv-heads 8 --head-dim 128
  tpsmon roofline --model-file llama-3-8b.Q4_K_M.gguf --gpu "RTX 4090" --per-user-tps 120 --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := o.evaluate(cmd)
			if err != nil {
				return err
			}
			return rep.write(cmd.OutOrStdout(), o.format)
		},
	}
	cmd.Long += "\n\nBuilt-in GPUs: " + gpuNames() + "."
	f := cmd.Flags()
	f.Float64Var(&o.paramsB, "params-b", 0, "total parameters, in billions (embeddings included)")
	f.Float64Var(&o.bytesPerWeight, "bytes-per-weight", 0, "bytes per weight: 2 BF16, 1 FP8, 0.5625 Q4_0, ~0.61 Q4_K_M (default: the file's real bytes, the config's dtype, else 2)")
	f.Float64Var(&o.activeB, "active-params-b", 0, "MoE: parameters one token uses, in billions")
	f.Float64Var(&o.embedB, "embed-params-b", 0, "input embedding parameters, in billions (gathered, not streamed; 0 when tied)")
	f.Float64Var(&o.replicatedB, "replicated-params-b", 0, "streamed parameters every GPU reads whole under tp, in billions (an LM head the engine does not split)")
	f.IntVar(&o.layers, "layers", 0, "transformer layers")
	f.IntVar(&o.kvHeads, "kv-heads", 0, "KV heads (GQA)")
	f.IntVar(&o.headDim, "head-dim", 0, "head dimension")
	f.Float64Var(&o.kvBytes, "kv-bytes", 0, "bytes per KV element: 2 BF16/FP16, 1 FP8 (default 2)")
	f.BoolVar(&o.kvReplicated, "kv-replicated", false, "every GPU reads the whole KV cache (MLA, data-parallel attention)")
	f.IntVar(&o.experts, "experts", 0, "MoE: routed experts per layer")
	f.IntVar(&o.expertsUsed, "experts-used", 0, "MoE: experts each token is routed to")
	f.StringVar(&o.gpu, "gpu", "", `GPU name from the built-in table ("H100 SXM", "A100-SXM4-80GB", "RTX 4090", ...)`)
	f.Float64Var(&o.peakBW, "peak-bw-gbps", 0, "peak memory bandwidth per GPU, GB/s (over --gpu's)")
	f.Float64Var(&o.peakTFLOPS, "peak-tflops", 0, "dense peak TFLOPS per GPU (over --gpu's)")
	f.IntVar(&o.tp, "tp", 1, "tensor-parallel GPUs")
	f.Float64Var(&o.batch, "batch", 1, "running sequences")
	f.Float64Var(&o.context, "context", 0, "mean tokens in each running sequence's KV cache")
	f.Float64Var(&o.perUserTPS, "per-user-tps", 0, "measured tokens/s of one sequence")
	f.StringVar(&o.tpot, "tpot", "", `measured time per output token ("25ms", or a number of milliseconds)`)
	f.Float64Var(&o.speculative, "speculative", 1, "mean tokens each sequence gains per decode step (speculative decoding's accept length; 1 without)")
	f.StringVar(&o.modelConfig, "model-config", "", "a Hugging Face config.json")
	f.StringVar(&o.modelFile, "model-file", "", "a GGUF or safetensors file (or index, or model directory)")
	f.StringVar(&o.format, "format", "table", "table or json")
	return cmd
}

func checkFlag(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("--%s %v: want a number ≥ 0", name, v)
	}
	return nil
}

// facts merges the model config, the model file and the flags, a flag
// winning, and says which defaults it took.
func (o *rooflineOpts) model(cmd *cobra.Command) (roofline.Model, string, []string, error) {
	var notes []string
	var facts modelfile.Facts
	if o.modelConfig != "" {
		c, err := modelfile.ReadConfig(o.modelConfig)
		if err != nil {
			return roofline.Model{}, "", nil, fmt.Errorf("--model-config: %w", err)
		}
		facts = c
	}
	if o.modelFile != "" {
		mf, err := modelfile.Read(o.modelFile)
		if err != nil {
			return roofline.Model{}, "", nil, fmt.Errorf("--model-file: %w", err)
		}
		facts = facts.Over(mf)
	}
	m := facts.Model()
	set := cmd.Flags().Changed
	for _, f := range []struct {
		name string
		v    float64
	}{{"params-b", o.paramsB}, {"bytes-per-weight", o.bytesPerWeight}, {"active-params-b", o.activeB},
		{"embed-params-b", o.embedB}, {"replicated-params-b", o.replicatedB}, {"kv-bytes", o.kvBytes}, {"peak-bw-gbps", o.peakBW}, {"peak-tflops", o.peakTFLOPS},
		{"batch", o.batch}, {"context", o.context}, {"per-user-tps", o.perUserTPS}, {"speculative", o.speculative}} {
		if err := checkFlag(f.name, f.v); err != nil {
			return roofline.Model{}, "", nil, err
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", o.layers}, {"kv-heads", o.kvHeads}, {"head-dim", o.headDim}, {"experts", o.experts}, {"experts-used", o.expertsUsed}, {"tp", o.tp}} {
		if f.v < 0 {
			return roofline.Model{}, "", nil, fmt.Errorf("--%s %d: want a count ≥ 0", f.name, f.v)
		}
	}
	if set("params-b") {
		// Named parameters: the file's totals no longer apply, its bytes
		// per parameter do.
		bpp := 0.0
		if m.WeightBytes > 0 {
			bpp = m.WeightBytes / m.Params
		}
		m.Params, m.WeightBytes, m.ActiveParams = o.paramsB*1e9, 0, 0
		if m.BytesPerWeight == 0 {
			m.BytesPerWeight = bpp
		}
		m.EmbedParams = 0
		if facts.EmbedIncluded || facts.Source == "" {
			m.EmbedParams = facts.EmbedParams
		}
	}
	if set("bytes-per-weight") {
		m.BytesPerWeight, m.WeightBytes = o.bytesPerWeight, 0
	}
	if m.Params == 0 {
		return roofline.Model{}, "", nil, errors.New("the parameter count is unknown: give --params-b or a --model-file")
	}
	if m.WeightBytes == 0 && m.BytesPerWeight == 0 {
		m.BytesPerWeight = 2
		notes = append(notes, "bytes per weight not given: 2 (BF16) assumed")
	}
	if set("active-params-b") {
		m.ActiveParams = o.activeB * 1e9
	}
	if set("embed-params-b") {
		m.EmbedParams = o.embedB * 1e9
	}
	m.ReplicatedParams = o.replicatedB * 1e9
	if set("experts") || set("experts-used") {
		m.Experts, m.ExpertsUsed = o.experts, o.expertsUsed
	}
	if set("layers") {
		m.Layers = o.layers
	}
	if set("kv-heads") {
		m.KVHeads = o.kvHeads
	}
	if set("head-dim") {
		m.HeadDim = o.headDim
	}
	if set("kv-bytes") {
		m.KVBytes = o.kvBytes
	}
	if m.KVBytes == 0 {
		m.KVBytes = 2
		if o.context > 0 {
			notes = append(notes, "kv bytes not given: 2 (BF16/FP16 cache) assumed")
		}
	}
	m.KVReplicated = m.KVReplicated || o.kvReplicated
	return m, facts.Source, notes, nil
}

func (o *rooflineOpts) gpuSpec(cmd *cobra.Command, bytesPerWeight float64) (roofline.GPU, error) {
	var g roofline.GPU
	if o.gpu != "" {
		s, err := roofline.Lookup(o.gpu)
		if err != nil {
			return g, fmt.Errorf("--gpu: %w", err)
		}
		g = s.GPU(bytesPerWeight)
	}
	if cmd.Flags().Changed("peak-bw-gbps") {
		g.PeakBWGBps, g.Source = o.peakBW, "--peak-bw-gbps"
		if g.Name == "" {
			g.Name = "custom"
		}
	}
	if cmd.Flags().Changed("peak-tflops") {
		g.PeakTFLOPS = o.peakTFLOPS
	}
	if g.PeakBWGBps == 0 {
		return g, errors.New("the GPU is unknown: give --gpu NAME or --peak-bw-gbps")
	}
	return g, nil
}

// parseTPOT reads a duration or a bare number of milliseconds.
func parseTPOT(s string) (float64, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return 0, fmt.Errorf("--tpot %s: want a positive time", s)
		}
		return d.Seconds(), nil
	}
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(ms) || math.IsInf(ms, 0) || ms <= 0 {
		return 0, fmt.Errorf("--tpot %q: want a positive time (25ms) or milliseconds (25)", s)
	}
	return ms / 1000, nil
}

type rooflineReport struct {
	GPU          string  `json:"gpu"`
	GPUSource    string  `json:"gpu_source"`
	ModelSource  string  `json:"model_source,omitempty"`
	PeakBWGBps   float64 `json:"peak_bw_gbps"`
	PeakTFLOPS   float64 `json:"peak_tflops,omitempty"`
	TP           int     `json:"tp"`
	Batch        float64 `json:"batch"`
	Context      float64 `json:"context"`
	TokensPerStp float64 `json:"tokens_per_step"`

	StreamedParams  float64 `json:"streamed_params"`
	WeightBytesStep float64 `json:"weight_bytes_per_step"`
	KVBytesStep     float64 `json:"kv_bytes_per_step"`
	BytesStep       float64 `json:"bytes_per_step"`
	KVBytesPerToken float64 `json:"kv_bytes_per_token,omitempty"`
	FLOPsStep       float64 `json:"flops_per_step"`
	ExpertsRead     float64 `json:"experts_read_per_layer,omitempty"`

	Bound             string   `json:"bound"`
	CeilingStepsPerS  float64  `json:"ceiling_steps_per_s"`
	CeilingPerUserTPS float64  `json:"ceiling_per_user_tps"`
	CeilingSystemTPS  float64  `json:"ceiling_system_tps"`
	CeilingTPOTms     float64  `json:"ceiling_tpot_ms"`
	MeasuredPerUser   *float64 `json:"measured_per_user_tps,omitempty"`
	MeasuredSystem    *float64 `json:"measured_system_tps,omitempty"`
	MeasuredSteps     *float64 `json:"measured_steps_per_s,omitempty"`
	MBU               *float64 `json:"mbu"`
	MFU               *float64 `json:"mfu,omitempty"`
	Warnings          []string `json:"warnings"`
}

func (o *rooflineOpts) evaluate(cmd *cobra.Command) (rooflineReport, error) {
	if o.format != "table" && o.format != "json" {
		return rooflineReport{}, fmt.Errorf("--format %q: want table or json", o.format)
	}
	m, src, notes, err := o.model(cmd)
	if err != nil {
		return rooflineReport{}, err
	}
	bpw := m.BytesPerWeight
	if m.WeightBytes > 0 {
		bpw = m.WeightBytes / m.Params
	}
	g, err := o.gpuSpec(cmd, bpw)
	if err != nil {
		return rooflineReport{}, err
	}
	load := roofline.Load{TP: o.tp, Batch: o.batch, Context: o.context, TokensPerStep: o.speculative}
	perUser := o.perUserTPS
	if o.tpot != "" {
		if cmd.Flags().Changed("per-user-tps") {
			return rooflineReport{}, errors.New("--per-user-tps and --tpot say the same thing: give one")
		}
		s, err := parseTPOT(o.tpot)
		if err != nil {
			return rooflineReport{}, err
		}
		perUser = 1 / s
	}
	var u roofline.Utilization
	if perUser > 0 || cmd.Flags().Changed("per-user-tps") {
		u, err = roofline.Measure(m, g, load, perUser)
	} else {
		u.Ceiling, err = roofline.Compute(m, g, load)
	}
	if err != nil {
		return rooflineReport{}, err
	}
	c := u.Ceiling
	r := rooflineReport{
		GPU: g.Name, GPUSource: g.Source, ModelSource: src, PeakBWGBps: g.PeakBWGBps, PeakTFLOPS: g.PeakTFLOPS,
		TP: load.TP, Batch: load.Batch, Context: load.Context, TokensPerStp: load.TokensPerStep,
		WeightBytesStep: c.WeightBytes, KVBytesStep: c.KVBytes, BytesStep: c.Bytes, FLOPsStep: c.FLOPs,
		KVBytesPerToken: c.KVPerTokenGB * 1e9, ExpertsRead: c.ExpertsRead, StreamedParams: m.Params - m.EmbedParams,
		Bound: c.Bound, CeilingStepsPerS: c.StepsPerS, CeilingPerUserTPS: c.PerUserTPS, CeilingSystemTPS: c.SystemTPS,
		CeilingTPOTms: 1000 / c.PerUserTPS, Warnings: append(notes, c.Warnings...),
	}
	if perUser > 0 {
		sys := perUser * load.Batch
		r.MeasuredPerUser, r.MeasuredSystem, r.MeasuredSteps, r.MBU = &perUser, &sys, &u.MeasuredStepsPerS, &u.MBU
		if g.PeakTFLOPS > 0 {
			r.MFU = &u.MFU
		}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	return r, nil
}

func (r rooflineReport) write(w io.Writer, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	line("gpu", "%s (%s)", r.GPU, r.GPUSource)
	line("peak bandwidth", "%.0f GB/s", r.PeakBWGBps)
	if r.PeakTFLOPS > 0 {
		line("peak dense TFLOPS", "%g", r.PeakTFLOPS)
	}
	line("load", "tp %d, batch %g, context %g, %g tokens/step", r.TP, r.Batch, r.Context, r.TokensPerStp)
	line("bytes/step/GPU", "%.3g (weights %.3g + KV %.3g)", r.BytesStep, r.WeightBytesStep, r.KVBytesStep)
	if r.ExpertsRead > 0 {
		line("experts read/layer", "%.2f", r.ExpertsRead)
	}
	line("bound", "%s", r.Bound)
	line("ceiling per user", "%.1f tokens/s (TPOT %.2f ms)", r.CeilingPerUserTPS, r.CeilingTPOTms)
	line("ceiling system", "%.1f tokens/s", r.CeilingSystemTPS)
	if r.MBU != nil {
		line("measured", "%.1f tokens/s per user, %.1f system, %.1f steps/s", *r.MeasuredPerUser, *r.MeasuredSystem, *r.MeasuredSteps)
		line("MBU", "%.3f", *r.MBU)
		if r.MFU != nil {
			line("MFU", "%.3f", *r.MFU)
		}
	}
	for _, wn := range r.Warnings {
		line("warning", "%s", wn)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("roofline: %w", err)
	}
	return nil
}

// gpuNames lists the built-in table, for errors and help.
func gpuNames() string {
	n := make([]string, len(roofline.Table))
	for i, s := range roofline.Table {
		n[i] = s.Name
	}
	return strings.Join(n, ", ")
}
