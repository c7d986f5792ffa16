package roofline

import "fmt"

// Server is what the live ceiling of one server needs beyond its
// windows: its model, its GPUs' peaks, how it spreads over them, and how
// many tokens its KV cache holds when full.
type Server struct {
	Model Model
	// GPU is one of the server's GPUs (they are alike).
	GPU GPU
	// TP is the tensor-parallel degree: by default the server's GPUs.
	TP int
	// KVTokens is the KV cache's capacity in tokens (llama.cpp's -c,
	// vLLM's "GPU KV cache size"); 0 when unknown: the KV is then not
	// counted, the ceiling an upper bound and MBU a lower one.
	KVTokens float64
	// TokensPerStep is speculative decoding's mean accept length; 1
	// without (0 is taken as 1).
	TokensPerStep float64
}

// Window is what one server window measured that the ceiling takes. A
// negative value is unknown.
type Window struct {
	// Running is the mean number of running requests.
	Running float64
	// SystemTPS is the output tokens per second of all of them.
	SystemTPS float64
	// KVUsage is the KV cache's mean occupancy, 0..1.
	KVUsage float64
	// StepsPerS is the engine's own count of decode steps per second
	// (llama.cpp n_decode_total, TensorRT-LLM iterations); otherwise
	// the steps are the system rate over running × tokens per step.
	StepsPerS float64
}

// Live is one window's distance from its ceiling.
type Live struct {
	// MBU is the bytes the window's steps read over what the peak
	// bandwidth allows in the same time (never clamped).
	MBU float64
	// CeilingTPS is the system tokens/s the hardware could give at the
	// window's running requests and KV occupancy.
	CeilingTPS float64
	// StepsPerS is the decode steps per second the MBU took.
	StepsPerS float64
	// KVCounted says the window's KV occupancy was counted; without it
	// CeilingTPS is an upper bound and MBU a lower one.
	KVCounted bool
}

// Check says whether s can give a live ceiling: the error names the
// missing or wrong fact.
func (s Server) Check() error {
	if s.Model.Params <= 0 {
		return fmt.Errorf("%w: the model's size is unknown (servers[].model_file, or llama.cpp's /props model path)", ErrInput)
	}
	if s.GPU.PeakBWGBps <= 0 {
		return fmt.Errorf("%w: the GPU's peak bandwidth is unknown (a GPU in the table, NVML's memory clock, or servers[].roofline.peak_bw_gbps)", ErrInput)
	}
	_, err := Compute(s.Model, s.GPU, s.load(1, 0))
	return err
}

func (s Server) load(batch, context float64) Load {
	tp, tps := s.TP, s.TokensPerStep
	if tp < 1 {
		tp = 1
	}
	if tps == 0 {
		tps = 1
	}
	return Load{TP: tp, Batch: batch, Context: context, TokensPerStep: tps}
}

// LiveWindow returns window w's MBU and ceiling on server s; ok is false
// when the window decoded nothing (no running requests or no tokens: the
// ceiling of an empty batch says nothing) or s lacks a fact (Check).
func LiveWindow(s Server, w Window) (Live, bool) {
	if w.Running <= 0 || w.SystemTPS <= 0 {
		return Live{}, false
	}
	var l Live
	// The batch is the window's running requests, or the batch its steps
	// decoded when that is larger: running is a mean of sampled gauges, and
	// in a window the server spent partly idle (or between two samples) it
	// can read 0.2 where every step decoded one sequence; a ceiling at 0.2
	// sequences would sit below the tokens the steps made (seen live: 124
	// tok/s against a "ceiling" of 113).
	batch := w.Running
	if w.StepsPerS > 0 {
		batch = max(batch, w.SystemTPS/(w.StepsPerS*s.load(1, 0).TokensPerStep))
	}
	context := 0.0
	if s.KVTokens > 0 && w.KVUsage >= 0 && s.Model.HasKV() {
		context, l.KVCounted = w.KVUsage*s.KVTokens/batch, true
	}
	load := s.load(batch, context)
	c, err := Compute(s.Model, s.GPU, load)
	if err != nil {
		return Live{}, false
	}
	l.CeilingTPS = c.SystemTPS
	l.StepsPerS = w.StepsPerS
	if l.StepsPerS < 0 {
		l.StepsPerS = w.SystemTPS / (batch * load.TokensPerStep)
	}
	l.MBU = c.Bytes * l.StepsPerS / (s.GPU.PeakBWGBps * 1e9)
	return l, true
}
