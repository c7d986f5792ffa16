// Package modelfacts gathers what the analysis stage's decode ceiling
// needs to know of each server and GPU: the model files' headers and the
// configuration for the servers, NVML's names and memory clocks against
// the built-in table for the GPUs. It reads files; the analysis reads
// nothing.
package modelfacts

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/modelfile"
	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sample"
)

// ErrNoModel says a server has no model facts.
var ErrNoModel = errors.New("no model facts")

// Server returns the roofline facts of one configured server, or an error
// naming the missing or unreadable fact.
func Server(s config.ServerConfig) (*roofline.Server, error) {
	r := s.Roofline
	if s.ModelFile == "" && r.ParamsB == 0 {
		return nil, fmt.Errorf("%w: set servers[].model_file (GGUF, safetensors, a model directory) or servers[].roofline.params_b", ErrNoModel)
	}
	var f modelfile.Facts
	if s.ModelFile != "" {
		var err error
		if f, err = modelfile.Read(s.ModelFile); err != nil {
			return nil, err
		}
	}
	m := f.Model()
	overlay(&m, f, r)
	if m.Params == 0 {
		return nil, fmt.Errorf("%w: %s gives no parameter count (a config.json alone does not: name the weights, or set servers[].roofline.params_b)", ErrNoModel, s.ModelFile)
	}
	if m.WeightBytes == 0 && m.BytesPerWeight == 0 {
		m.BytesPerWeight = 2
	}
	if r.KVBytes > 0 {
		m.KVBytes = r.KVBytes
	}
	if m.KVBytes == 0 {
		m.KVBytes = 2
	}
	srv := &roofline.Server{Model: m, TP: r.TP, KVTokens: r.KVTokens, TokensPerStep: r.Speculative}
	bpw := m.BytesPerWeight
	if m.WeightBytes > 0 {
		bpw = m.WeightBytes / m.Params
	}
	if r.GPU != "" {
		spec, err := roofline.Lookup(r.GPU)
		if err != nil {
			return nil, fmt.Errorf("roofline.gpu: %w", err)
		}
		srv.GPU = spec.GPU(bpw)
	}
	if r.PeakBWGBps > 0 {
		srv.GPU.PeakBWGBps, srv.GPU.Source = r.PeakBWGBps, "servers[].roofline.peak_bw_gbps"
	}
	if r.PeakTFLOPS > 0 {
		srv.GPU.PeakTFLOPS = r.PeakTFLOPS
	}
	probe := *srv
	if probe.GPU.PeakBWGBps == 0 {
		probe.GPU.PeakBWGBps = 1 // the GPU comes later (NVML): check the model alone
	}
	if err := probe.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.ModelFile, err)
	}
	return srv, nil
}

// overlay puts the configured facts over the file's: named parameters
// replace the file's totals (its bytes per parameter stay).
func overlay(m *roofline.Model, f modelfile.Facts, r config.RooflineConfig) {
	if r.ParamsB > 0 {
		bpp := 0.0
		if m.WeightBytes > 0 {
			bpp = m.WeightBytes / m.Params
		}
		m.Params, m.WeightBytes, m.ActiveParams, m.EmbedParams = r.ParamsB*1e9, 0, 0, 0
		if f.EmbedIncluded {
			m.EmbedParams = f.EmbedParams
		}
		if m.BytesPerWeight == 0 {
			m.BytesPerWeight = bpp
		}
	}
	if r.BytesPerWeight > 0 {
		m.BytesPerWeight, m.WeightBytes = r.BytesPerWeight, 0
	}
	if r.ActiveParamsB > 0 {
		m.ActiveParams = r.ActiveParamsB * 1e9
	}
	if r.EmbedParamsB > 0 {
		m.EmbedParams = r.EmbedParamsB * 1e9
	}
	if r.Experts > 0 || r.ExpertsUsed > 0 {
		m.Experts, m.ExpertsUsed = r.Experts, r.ExpertsUsed
	}
	for _, v := range []struct {
		dst *int
		v   int
	}{{&m.Layers, r.Layers}, {&m.KVHeads, r.KVHeads}, {&m.HeadDim, r.HeadDim}} {
		if v.v > 0 {
			*v.dst = v.v
		}
	}
}

// WithEngine returns the roofline facts of server s from its
// configuration and, for what the configuration does not say, from what
// its engine said (e), with the sources used, for the log and tpsmon
// check. The configuration wins fact by fact: a model file or params_b
// over the engine's model; kv_tokens and kv_bytes over the engine's KV
// capacity and dtype.
func WithEngine(s config.ServerConfig, e collector.EngineFacts) (*roofline.Server, string, error) {
	r := &s.Roofline
	var src []string
	// logged is how the model the server logged was found, loggedErr why
	// it was not: said with what its reading gives or lacks.
	var logged string
	var loggedErr error
	switch {
	case s.ModelFile != "" || r.ParamsB > 0:
		src = append(src, "model from the configuration")
		if s.ModelFile == "" && r.BytesPerWeight == 0 && e.WeightBytesPerGPU > 0 {
			// vLLM's weights per GPU, times the GPUs, over the parameters.
			if tp := tpOf(s); tp > 0 {
				r.BytesPerWeight = e.WeightBytesPerGPU * float64(tp) / (r.ParamsB * 1e9)
				src = append(src, fmt.Sprintf("bytes per weight %.3g from the engine (Model loading took %.2f GiB per GPU × %d)", r.BytesPerWeight, e.WeightBytesPerGPU/(1<<30), tp))
			}
		}
	case e.ModelPath != "" && readable(e.ModelPath):
		s.ModelFile = e.ModelPath
		src = append(src, "model from the engine (/props model_path "+e.ModelPath+")")
	default:
		if e.LoggedModel != "" {
			path, how, err := LoggedModel(e, HubDirs(r.HFHubDirs, e))
			if err == nil {
				s.ModelFile, logged = path, how
				src = append(src, "model from the engine's log ("+how+")")
				break
			}
			loggedErr = err
		}
		if e.Params > 0 {
			src = append(src, metaModel(r, e))
		}
	}
	if r.KVTokens == 0 && e.KVTokens > 0 {
		r.KVTokens = e.KVTokens
		src = append(src, fmt.Sprintf("KV capacity %.0f tokens from the engine (%s)", e.KVTokens, e.KVTokensFrom))
	}
	if r.KVBytes == 0 {
		if b := kvDtypeBytes(e.KVDtype); b > 0 {
			r.KVBytes = b
			src = append(src, fmt.Sprintf("KV element %g bytes from the engine (cache_dtype %s)", b, e.KVDtype))
		}
	}
	srv, err := Server(s)
	switch {
	case err == nil:
	case logged != "":
		// The files the server logged do not give a ceiling: no fact is
		// taken from them, and the configuration's error is not theirs.
		return nil, "", fmt.Errorf("%w: %s: %w", ErrNoModel, logged, err)
	case errors.Is(err, ErrNoModel) && loggedErr != nil:
		return nil, "", fmt.Errorf("%w; %w", err, loggedErr)
	case errors.Is(err, ErrNoModel) && e.Said():
		return nil, "", fmt.Errorf("%w (the engine said no model path readable here nor a parameter count)", err)
	default:
		return nil, "", err
	}
	if loggedErr != nil {
		src = append(src, loggedErr.Error())
	}
	return srv, strings.Join(src, "; "), nil
}

// metaModel sets r's model from llama-server's /v1/models meta, and
// says so.
func metaModel(r *config.RooflineConfig, e collector.EngineFacts) string {
	r.ParamsB = e.Params / 1e9
	if e.SizeBytes > 0 {
		r.BytesPerWeight = e.SizeBytes / e.Params
	}
	why := ""
	if e.ModelPath != "" {
		why = ", its model_path " + e.ModelPath + " not readable here"
	}
	embed := ""
	if r.EmbedParamsB == 0 && e.NEmbd > 0 && e.NVocab > 0 {
		// The input embedding is gathered, not streamed; tied to the
		// LM head it would be streamed, which the meta does not say:
		// taken as untied, the ceiling stays an upper bound.
		r.EmbedParamsB = float64(e.NEmbd) * float64(e.NVocab) / 1e9
		embed = fmt.Sprintf("; input embedding n_embd × n_vocab = %.4g not streamed (if tied to the LM head, the ceiling is an upper bound)", r.EmbedParamsB*1e9)
	}
	return fmt.Sprintf("model from the engine (/v1/models meta: n_params %.4g, size %.4g B%s%s; no architecture, so the KV is not counted)", e.Params, e.SizeBytes, why, embed)
}

// tpOf is the GPUs a server is configured with, or its roofline.tp; 0
// when they are found at run time (auto).
func tpOf(s config.ServerConfig) int {
	if s.Roofline.TP > 0 {
		return s.Roofline.TP
	}
	for _, g := range s.GPUs {
		if g == "auto" || g == "*" {
			return 0
		}
	}
	return len(s.GPUs)
}

func readable(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// kvDtypeBytes is the size of one KV element of vLLM's cache_dtype; 0
// when unknown (auto: the model's dtype).
func kvDtypeBytes(d string) float64 {
	switch {
	case strings.HasPrefix(d, "fp8"):
		return 1
	case d == "bfloat16" || d == "float16" || d == "half":
		return 2
	case d == "float32" || d == "float":
		return 4
	}
	return 0
}

// Servers returns the facts of every configured server that has them,
// and why each of the others has none.
func Servers(cfg *config.Config) (map[string]analysis.ServerFacts, map[string]error) {
	facts, missing := map[string]analysis.ServerFacts{}, map[string]error{}
	for _, s := range cfg.Servers {
		r, err := Server(s)
		if err != nil {
			missing[s.Name] = err
			continue
		}
		facts[s.Name] = analysis.ServerFacts{Roofline: r}
	}
	return facts, missing
}

// GPUs returns the peaks of whole GPUs by label (their index), from
// their NVML names and memory clocks (roofline.Peak: the table wins), and
// what to note: each disagreement, each GPU the table lacks, each that
// has no peak at all.
func GPUs(devs []sample.Device) (map[string]roofline.Spec, []string) {
	out := map[string]roofline.Spec{}
	var notes []string
	for _, d := range devs {
		nv := d.PeakBandwidthGBps()
		g, note, err := roofline.Peak(d.Name, nv, 2)
		if note != "" {
			notes = append(notes, note)
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("GPU %d: %v: no ceiling for its servers", d.Index, err))
			continue
		}
		spec, lerr := roofline.Lookup(d.Name)
		if lerr != nil {
			spec = roofline.Spec{Name: g.Name, BWGBps: g.PeakBWGBps, Source: g.Source}
		}
		out[strconv.Itoa(d.Index)] = spec
	}
	return out, notes
}
