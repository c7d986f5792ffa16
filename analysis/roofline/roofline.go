// Package roofline is the physical ceiling of LLM decode: how many bytes
// each decode step must read per GPU, how fast the GPU can read them (or,
// at large batch, compute on them), and so the most tokens per second the
// hardware could give at a batch and context. Against a measured rate it
// gives the model bandwidth utilization (MBU).
//
// The model, per decode step and per GPU (tp GPUs in tensor parallel):
//
//	weights  = ((streamed params - input embedding - replicated) / tp + replicated) × bytes per param
//	kv       = Σ running sequences' context × kv_bytes_per_token_per_gpu
//	kv_bytes_per_token_per_gpu = 2 × layers × ceil(kv_heads / tp) × head_dim × kv_dtype_bytes
//	bytes    = weights + kv
//	flops    = 2 × (active params - input embedding) × batch × tokens per step / tp
//	step     = max(bytes / peak bandwidth, flops / peak FLOPS)
//	MBU      = bytes × measured steps/s / peak bandwidth
//
// What the model counts and what it leaves out, and why:
//   - The input embedding is gathered (one row per token), not streamed, so
//     its parameters are not read per step. With tied embeddings the same
//     matrix is the LM head, which is streamed: then nothing is subtracted
//     (the model-file readers set EmbedParams to 0).
//   - Under tensor parallelism the body and the LM head are split tp ways.
//     KV heads are split too, but a GPU holds at least one: past the KV-head
//     count they are replicated (ceil). KVReplicated says the whole KV is
//     read on every GPU (MLA's latent cache, data-parallel attention).
//     Norms are replicated but are a few parameters per layer: left out.
//   - A mixture of experts reads only the experts its tokens are routed to.
//     With E routed experts, k per token and T tokens in a step, the
//     expected number of distinct experts a layer reads (uniform routing)
//     is E × (1 − (1 − k/E)^T): about k at batch 1, nearly E at large
//     batch. Without E and k only the active parameters are counted, which
//     is exact at batch 1 and a lower bound on bytes above it (warned).
//   - Speculative decoding: each step verifies several tokens per sequence
//     while reading the weights once, so tokens/s = steps/s × tokens per
//     step. The draft model's own reads are left out.
//   - FLOPs count the matrix products only (2 per weight per token);
//     attention's score FLOPs, small at decode, are left out.
//   - Reads overlap nothing: the step takes the larger of its memory and
//     compute times (the roofline), so the ceiling is an upper bound that a
//     real server approaches, never passes, unless a fact is wrong, and
//     then MBU above 1 is reported as it is, with the likely cause.
package roofline

import (
	"errors"
	"fmt"
	"math"
)

// ErrInput marks a fact or flag that is missing, out of range or not a
// number: the error names it.
var ErrInput = errors.New("roofline")

// Model is what the roofline needs to know of a model. Counts are in
// parameters (not billions), sizes in bytes.
type Model struct {
	// Params is the total parameter count, embeddings included.
	Params float64
	// WeightBytes is the real size of all weights (from the model file,
	// quantization scales included); 0 means Params × BytesPerWeight.
	WeightBytes float64
	// BytesPerWeight is used when WeightBytes is 0 (2 for BF16, 0.5625
	// for Q4_0, ~0.61 for Q4_K_M).
	BytesPerWeight float64
	// ActiveParams is what one token uses in a mixture of experts
	// (embeddings included, as published); 0 means dense (= Params).
	ActiveParams float64
	// EmbedParams is the input embedding's parameter count: gathered, not
	// streamed. 0 when unknown or tied to the LM head.
	EmbedParams float64
	// ReplicatedParams are streamed parameters every GPU reads whole
	// under tensor parallelism: an LM head the engine does not split
	// (gpt-fast), norms. 0 when the engine splits them.
	ReplicatedParams float64
	// Experts and ExpertsUsed are the routed experts per MoE layer and
	// those each token is routed to; 0 when dense or unknown.
	Experts, ExpertsUsed int

	Layers, KVHeads, HeadDim int
	// KVBytes is the size of one KV element (2 for BF16/FP16, 1 for FP8).
	KVBytes float64
	// KVReplicated: every GPU reads the whole KV cache (MLA, attention DP).
	KVReplicated bool
}

// GPU is one GPU's peaks, per GPU.
type GPU struct {
	Name string
	// PeakBWGBps is the datasheet memory bandwidth, 10^9 bytes/s.
	PeakBWGBps float64
	// PeakTFLOPS is the dense tensor peak for the step's math, 10^12/s;
	// 0 when unknown: the compute bound is then not checked (warned).
	PeakTFLOPS float64
	Source     string
}

// Load is the decode situation: how many sequences run, how long they are.
type Load struct {
	// TP is the tensor-parallel degree: GPUs sharing each step.
	TP int
	// Batch is the number of running sequences (a window's average may
	// be fractional).
	Batch float64
	// Context is the mean number of tokens in each running sequence's KV
	// cache.
	Context float64
	// TokensPerStep is what each sequence gains per decode step: 1
	// without speculative decoding, the mean accepted length with it.
	TokensPerStep float64
}

// Ceiling is the roofline of one Load.
type Ceiling struct {
	WeightBytes float64 // weight bytes each GPU reads per step
	KVBytes     float64 // KV bytes each GPU reads per step
	Bytes       float64 // their sum
	FLOPs       float64 // per GPU per step
	// MemoryS and ComputeS are the step's time at the peaks; ComputeS is
	// 0 when the GPU's FLOPS are unknown.
	MemoryS, ComputeS float64
	// Bound is "memory" or "compute": which time sets the step.
	Bound        string
	StepsPerS    float64 // the most decode steps per second
	PerUserTPS   float64 // tokens/s one sequence could get
	SystemTPS    float64 // tokens/s all running sequences together could get
	ExpertsRead  float64 // expected distinct experts per MoE layer; 0 when dense
	KVPerTokenGB float64 // KV bytes per token per GPU, in 10^9
	Warnings     []string
}

// Bounds.
const (
	BoundMemory  = "memory"
	BoundCompute = "compute"
)

func finitePos(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
		return fmt.Errorf("%w: %s must be a positive number, got %v", ErrInput, name, v)
	}
	return nil
}

func finiteNonNeg(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s must be a number ≥ 0, got %v", ErrInput, name, v)
	}
	return nil
}

// Sanity bounds: past these a number is a typo (bytes for billions, bits
// for bytes), and a wrong ceiling is worse than an error.
const (
	maxParams   = 1e14 // 100 T parameters
	maxBatch    = 1e6
	maxContext  = 1e8
	maxTP       = 1024
	maxBW       = 1e6 // GB/s: 1 PB/s
	maxTFLOPS   = 1e6
	maxLayers   = 10000
	maxHeads    = 100000
	maxHeadDim  = 100000
	maxBytesPer = 8 // bytes per weight or KV element (FP64)
	maxSpec     = 64
)

func (m Model) check() error {
	if err := finitePos("params", m.Params); err != nil {
		return err
	}
	if m.Params > maxParams {
		return fmt.Errorf("%w: params %g is more than %g: give billions to --params-b, parameters here", ErrInput, m.Params, float64(maxParams))
	}
	if m.WeightBytes != 0 {
		if err := finitePos("weight bytes", m.WeightBytes); err != nil {
			return err
		}
	} else {
		if err := finitePos("bytes per weight", m.BytesPerWeight); err != nil {
			return err
		}
		if m.BytesPerWeight > maxBytesPer {
			return fmt.Errorf("%w: bytes per weight %g is more than %d: bytes, not bits", ErrInput, m.BytesPerWeight, maxBytesPer)
		}
	}
	if err := finiteNonNeg("active params", m.ActiveParams); err != nil {
		return err
	}
	if m.ActiveParams > m.Params {
		return fmt.Errorf("%w: active params %g exceed the total %g", ErrInput, m.ActiveParams, m.Params)
	}
	if err := finiteNonNeg("embedding params", m.EmbedParams); err != nil {
		return err
	}
	if m.EmbedParams >= m.active() {
		return fmt.Errorf("%w: embedding params %g are not less than the active params %g", ErrInput, m.EmbedParams, m.active())
	}
	if err := finiteNonNeg("replicated params", m.ReplicatedParams); err != nil {
		return err
	}
	if m.ReplicatedParams+m.EmbedParams >= m.active() {
		return fmt.Errorf("%w: replicated params %g and embedding %g leave nothing to split of %g", ErrInput, m.ReplicatedParams, m.EmbedParams, m.active())
	}
	if m.Experts < 0 || m.ExpertsUsed < 0 || (m.Experts == 0) != (m.ExpertsUsed == 0) || m.ExpertsUsed > m.Experts {
		return fmt.Errorf("%w: experts %d and experts per token %d: give both, 0 < per token ≤ experts", ErrInput, m.Experts, m.ExpertsUsed)
	}
	if m.Experts > 0 && m.ExpertsUsed < m.Experts && m.ActiveParams == 0 {
		return fmt.Errorf("%w: %d experts with %d per token need the active parameter count", ErrInput, m.Experts, m.ExpertsUsed)
	}
	return nil
}

func (m Model) active() float64 {
	if m.ActiveParams > 0 {
		return m.ActiveParams
	}
	return m.Params
}

// HasKV reports whether the KV facts are all given.
func (m Model) HasKV() bool {
	return m.Layers > 0 && m.KVHeads > 0 && m.HeadDim > 0 && m.KVBytes > 0
}

func (m Model) checkKV() error {
	switch {
	case m.Layers <= 0 || m.Layers > maxLayers:
		return fmt.Errorf("%w: layers %d out of range 1..%d", ErrInput, m.Layers, maxLayers)
	case m.KVHeads <= 0 || m.KVHeads > maxHeads:
		return fmt.Errorf("%w: kv heads %d out of range 1..%d", ErrInput, m.KVHeads, maxHeads)
	case m.HeadDim <= 0 || m.HeadDim > maxHeadDim:
		return fmt.Errorf("%w: head dim %d out of range 1..%d", ErrInput, m.HeadDim, maxHeadDim)
	}
	if err := finitePos("kv bytes", m.KVBytes); err != nil {
		return err
	}
	if m.KVBytes > maxBytesPer {
		return fmt.Errorf("%w: kv bytes %g is more than %d: bytes per element, not bits", ErrInput, m.KVBytes, maxBytesPer)
	}
	return nil
}

// KVBytesPerToken is 2 (K and V) × layers × KV heads × head dim × element
// size: the whole model's KV for one token, before tensor parallelism.
func (m Model) KVBytesPerToken() float64 {
	return 2 * float64(m.Layers) * float64(m.KVHeads) * float64(m.HeadDim) * m.KVBytes
}

func (m Model) kvPerTokenPerGPU(tp int) float64 {
	heads := m.KVHeads
	if !m.KVReplicated {
		heads = (m.KVHeads + tp - 1) / tp
	}
	return 2 * float64(m.Layers) * float64(heads) * float64(m.HeadDim) * m.KVBytes
}

func (m Model) bytesPerParam() float64 {
	if m.WeightBytes > 0 {
		return m.WeightBytes / m.Params
	}
	return m.BytesPerWeight
}

// streamedParams is the parameters one step reads with T tokens in it,
// before the embedding is taken off, and the expected experts per layer.
func (m Model) streamedParams(tokens float64) (params, experts float64) {
	if m.ActiveParams == 0 || m.ActiveParams == m.Params {
		return m.Params, 0
	}
	if m.Experts == 0 {
		return m.ActiveParams, 0 // lower bound above batch 1; warned
	}
	e, k := float64(m.Experts), float64(m.ExpertsUsed)
	perExpert := (m.Params - m.ActiveParams) / (e - k) // one expert, all layers
	shared := m.Params - e*perExpert
	experts = e * (1 - math.Pow(1-k/e, tokens))
	if experts < k {
		experts = k // fewer tokens than one (a fractional batch below 1)
	}
	return shared + perExpert*experts, experts
}

func (l Load) check() error {
	if l.TP < 1 || l.TP > maxTP {
		return fmt.Errorf("%w: tp %d out of range 1..%d", ErrInput, l.TP, maxTP)
	}
	if err := finitePos("batch", l.Batch); err != nil {
		return err
	}
	if l.Batch > maxBatch {
		return fmt.Errorf("%w: batch %g is more than %g", ErrInput, l.Batch, float64(maxBatch))
	}
	if err := finiteNonNeg("context", l.Context); err != nil {
		return err
	}
	if l.Context > maxContext {
		return fmt.Errorf("%w: context %g tokens is more than %g", ErrInput, l.Context, float64(maxContext))
	}
	if err := finitePos("tokens per step (speculative)", l.TokensPerStep); err != nil {
		return err
	}
	if l.TokensPerStep < 1 || l.TokensPerStep > maxSpec {
		return fmt.Errorf("%w: tokens per step %g out of range 1..%d (1 without speculative decoding)", ErrInput, l.TokensPerStep, maxSpec)
	}
	return nil
}

func (g GPU) check() error {
	if err := finitePos("peak bandwidth (GB/s)", g.PeakBWGBps); err != nil {
		return err
	}
	if g.PeakBWGBps > maxBW {
		return fmt.Errorf("%w: peak bandwidth %g GB/s is more than %g", ErrInput, g.PeakBWGBps, float64(maxBW))
	}
	if err := finiteNonNeg("peak TFLOPS", g.PeakTFLOPS); err != nil {
		return err
	}
	if g.PeakTFLOPS > maxTFLOPS {
		return fmt.Errorf("%w: peak TFLOPS %g is more than %g", ErrInput, g.PeakTFLOPS, float64(maxTFLOPS))
	}
	return nil
}

// Compute returns the ceiling of model m on GPU g under load l. A context
// above 0 needs the KV facts.
func Compute(m Model, g GPU, l Load) (Ceiling, error) {
	if err := m.check(); err != nil {
		return Ceiling{}, err
	}
	if err := g.check(); err != nil {
		return Ceiling{}, err
	}
	if err := l.check(); err != nil {
		return Ceiling{}, err
	}
	var c Ceiling
	if l.Context > 0 {
		if err := m.checkKV(); err != nil {
			return Ceiling{}, fmt.Errorf("%w (the KV cache of a %g-token context needs layers, kv heads, head dim and kv bytes)", err, l.Context)
		}
		kv := m.kvPerTokenPerGPU(l.TP)
		c.KVPerTokenGB = kv / 1e9
		c.KVBytes = l.Batch * l.Context * kv
		if !m.KVReplicated && m.KVHeads < l.TP {
			c.Warnings = append(c.Warnings, fmt.Sprintf("tp %d is more than the %d KV heads: each GPU holds a replicated head", l.TP, m.KVHeads))
		}
	}
	tokens := l.Batch * l.TokensPerStep
	streamed, experts := m.streamedParams(tokens)
	c.ExpertsRead = experts
	split := streamed - m.EmbedParams - m.ReplicatedParams
	c.WeightBytes = (split/float64(l.TP) + m.ReplicatedParams) * m.bytesPerParam()
	c.Bytes = c.WeightBytes + c.KVBytes
	c.FLOPs = 2 * (m.active() - m.EmbedParams) * tokens / float64(l.TP)
	c.MemoryS = c.Bytes / (g.PeakBWGBps * 1e9)
	step := c.MemoryS
	c.Bound = BoundMemory
	if g.PeakTFLOPS > 0 {
		c.ComputeS = c.FLOPs / (g.PeakTFLOPS * 1e12)
		if c.ComputeS > step {
			step, c.Bound = c.ComputeS, BoundCompute
		}
	} else {
		c.Warnings = append(c.Warnings, "the GPU's peak TFLOPS are unknown: the compute bound is not checked (give --peak-tflops)")
	}
	c.StepsPerS = 1 / step
	c.PerUserTPS = c.StepsPerS * l.TokensPerStep
	c.SystemTPS = c.PerUserTPS * l.Batch
	if m.ActiveParams > 0 && m.ActiveParams < m.Params && m.Experts == 0 && tokens > 1 {
		c.Warnings = append(c.Warnings, "MoE without expert counts: weights counted at the active parameters, a lower bound on bytes above batch 1 (the ceiling is an upper bound)")
	}
	return c, nil
}

// Utilization is a measured rate set against its ceiling.
type Utilization struct {
	Ceiling
	// MeasuredStepsPerS is the decode steps per second the measured rate
	// implies (per-user tokens/s ÷ tokens per step).
	MeasuredStepsPerS float64
	// MBU is bytes per step × measured steps/s ÷ peak bandwidth. Never
	// clamped: above 1 a fact is wrong, and Warnings says which likely.
	MBU float64
	// MFU is the same for FLOPs; 0 when the peak TFLOPS are unknown.
	MFU float64
}

// Measure sets a measured per-user rate (tokens/s one sequence got while
// l.Batch ran) against the ceiling.
func Measure(m Model, g GPU, l Load, perUserTPS float64) (Utilization, error) {
	if err := finitePos("per-user tokens/s", perUserTPS); err != nil {
		return Utilization{}, err
	}
	c, err := Compute(m, g, l)
	if err != nil {
		return Utilization{}, err
	}
	u := Utilization{Ceiling: c}
	u.MeasuredStepsPerS = perUserTPS / l.TokensPerStep
	u.MBU = c.Bytes * u.MeasuredStepsPerS / (g.PeakBWGBps * 1e9)
	if g.PeakTFLOPS > 0 {
		u.MFU = c.FLOPs * u.MeasuredStepsPerS / (g.PeakTFLOPS * 1e12)
	}
	if u.MBU > 1 {
		u.Warnings = append(u.Warnings, overOne(m, l, u.MBU))
	}
	if u.MFU > 1 {
		u.Warnings = append(u.Warnings, fmt.Sprintf("MFU %.2f is above 1: the FLOPs counted or the peak TFLOPS are wrong", u.MFU))
	}
	return u, nil
}

// overOne names the likely causes of an MBU above 1, the likeliest first.
func overOne(m Model, l Load, mbu float64) string {
	var causes []string
	if l.TokensPerStep == 1 {
		causes = append(causes, "speculative decoding (give --speculative with the mean tokens per step)")
	}
	if m.ActiveParams == 0 || m.ActiveParams == m.Params {
		causes = append(causes, "a mixture of experts counted with all its experts (give --active-params-b)")
	}
	causes = append(causes, "wrong bytes per weight (quantized weights: Q4_0 is 0.5625, Q4_K_M about 0.61; FP8 is 1)")
	if l.Context > 0 && m.KVBytes >= 2 {
		causes = append(causes, "an FP8 KV cache counted at 2 bytes (give --kv-bytes 1)")
	}
	causes = append(causes, "the wrong GPU or peak bandwidth")
	s := fmt.Sprintf("MBU %.2f is above 1: the measured rate needs more bandwidth than the GPU has, so a fact is wrong; likely: ", mbu)
	for i, c := range causes {
		if i > 0 {
			s += "; or "
		}
		s += c
	}
	return s
}
