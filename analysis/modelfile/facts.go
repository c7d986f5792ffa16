// Package modelfile reads the facts the roofline needs from a model's own
// files: a Hugging Face config.json (layers, KV heads, head dim, experts,
// dtype, tied embeddings), a safetensors header (the real bytes of each
// tensor) and a GGUF header (architecture keys and the tensor table, whose
// ggml types give the real bytes, quantization scales included). Only
// headers are read, never the weights.
//
// The GGUF reader is our own: the well-kept Go reader
// (github.com/gpustack/gguf-parser-go) brings gonum, x/crypto and an HTTP
// client into a daemon that needs forty lines of header.
package modelfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/internal/statefile"
)

// Facts are what one file says of a model. Zero is unknown.
type Facts struct {
	Name, Architecture string
	Source             string // "gguf", "safetensors", "config.json"

	// Params are the parameters a step can stream: with an untied LM
	// head the input embedding (EmbedParams, gathered not streamed) is
	// already left out of Params, ActiveParams and WeightBytes.
	Params, WeightBytes float64
	EmbedParams         float64
	// ExpertParams are the routed experts' parameters, all of them; with
	// Experts and ExpertsUsed they give the active parameters.
	ExpertParams float64
	// EmbedIncluded says Params still holds the embedding (config.json,
	// which counts no parameters, gives only EmbedParams).
	EmbedIncluded bool
	// BytesPerWeight is the dtype's size where the file names one dtype
	// (config.json's torch_dtype); WeightBytes is exact where known.
	BytesPerWeight float64
	Tied           bool

	Experts, ExpertsUsed     int
	Layers, KVHeads, HeadDim int
	KVBytes                  float64
	KVReplicated             bool
}

// Model returns the facts as a roofline model. Fields the file does not
// know stay 0 for the caller to fill.
func (f Facts) Model() roofline.Model {
	m := roofline.Model{
		Params: f.Params, WeightBytes: f.WeightBytes, BytesPerWeight: f.BytesPerWeight,
		Experts: f.Experts, ExpertsUsed: f.ExpertsUsed,
		Layers: f.Layers, KVHeads: f.KVHeads, HeadDim: f.HeadDim, KVBytes: f.KVBytes, KVReplicated: f.KVReplicated,
	}
	if f.EmbedIncluded {
		m.EmbedParams = f.EmbedParams
	}
	if f.ExpertsUsed == 0 { // a weights file counts experts, config.json says how many a token uses
		m.Experts = 0
	}
	if f.Experts > 0 && f.ExpertsUsed > 0 && f.ExpertsUsed <= f.Experts && f.ExpertParams > 0 && f.ExpertParams < f.Params {
		m.ActiveParams = f.Params - f.ExpertParams*(1-float64(f.ExpertsUsed)/float64(f.Experts))
	}
	return m
}

// Over returns f with every fact o knows put over it: a weights file's
// bytes over a config's dtype, a config's architecture where the file has
// none.
func (f Facts) Over(o Facts) Facts {
	pick := func(a, b float64) float64 {
		if b != 0 {
			return b
		}
		return a
	}
	pickI := func(a, b int) int {
		if b != 0 {
			return b
		}
		return a
	}
	r := f
	if o.Params != 0 {
		r.Params, r.ExpertParams, r.WeightBytes = o.Params, o.ExpertParams, o.WeightBytes
		r.EmbedParams, r.EmbedIncluded, r.Tied = o.EmbedParams, o.EmbedIncluded, o.Tied
		if o.WeightBytes != 0 {
			r.BytesPerWeight = 0
		}
	}
	r.BytesPerWeight = pick(r.BytesPerWeight, o.BytesPerWeight)
	r.Experts, r.ExpertsUsed = pickI(r.Experts, o.Experts), pickI(r.ExpertsUsed, o.ExpertsUsed)
	r.Layers, r.KVHeads, r.HeadDim = pickI(r.Layers, o.Layers), pickI(r.KVHeads, o.KVHeads), pickI(r.HeadDim, o.HeadDim)
	r.KVBytes = pick(r.KVBytes, o.KVBytes)
	r.KVReplicated = r.KVReplicated || o.KVReplicated
	if o.Name != "" {
		r.Name = o.Name
	}
	if o.Architecture != "" {
		r.Architecture = o.Architecture
	}
	if r.Source == "" {
		r.Source = o.Source
	} else if o.Source != "" {
		r.Source += "+" + o.Source
	}
	return r
}

// Read reads a model file by its kind: .gguf, .safetensors, a
// safetensors index (.index.json), config.json, or a directory holding a
// config.json and safetensors.
func Read(path string) (Facts, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Facts{}, fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	if st.IsDir() {
		return readDir(path)
	}
	switch name := strings.ToLower(filepath.Base(path)); {
	case strings.HasSuffix(name, ".gguf"):
		return ReadGGUF(path)
	case strings.HasSuffix(name, ".index.json"):
		return ReadSafetensorsIndex(path)
	case strings.HasSuffix(name, ".safetensors"):
		return ReadSafetensors(path)
	case strings.HasSuffix(name, ".json"):
		return ReadConfig(path)
	}
	return Facts{}, fmt.Errorf("%w: %s: not .gguf, .safetensors, .index.json or config.json", ErrBadFile, path)
}

func readDir(dir string) (Facts, error) {
	var f Facts
	cfg := filepath.Join(dir, "config.json")
	idx := filepath.Join(dir, "model.safetensors.index.json")
	one := filepath.Join(dir, "model.safetensors")
	has := map[string]bool{}
	for _, p := range []string{cfg, idx, one} {
		// A file there that cannot be looked at (a link loop, a directory
		// the user may not search) is said, not taken for one absent.
		var err error
		if has[p], err = exists(p); err != nil {
			return Facts{}, err
		}
	}
	if has[cfg] {
		c, err := ReadConfig(cfg)
		if err != nil {
			return Facts{}, err
		}
		f = c
	}
	switch {
	case has[idx]:
		w, err := ReadSafetensorsIndex(idx)
		if err != nil {
			return Facts{}, err
		}
		return f.Over(w), nil
	case has[one]:
		w, err := ReadSafetensors(one)
		if err != nil {
			return Facts{}, err
		}
		return f.Over(w), nil
	}
	if f.Source == "" {
		return Facts{}, fmt.Errorf("%w: %s has no config.json or model.safetensors", ErrBadFile, dir)
	}
	return f, nil
}

// exists says whether p is there; an error is one other than its absence.
func exists(p string) (bool, error) {
	_, err := os.Stat(p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("%w: %w", ErrBadFile, err)
}

// openRegular opens a model file only if it is a regular file: a FIFO
// named where a model is expected would hold the read until someone
// writes it, a device would never end.
func openRegular(path string) (*os.File, int64, error) {
	f, st, err := statefile.OpenRegular(path)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	return f, st.Size(), nil
}

// readSmall reads a JSON file of at most limit bytes (what names it
// says what it is); a bigger one is refused, not read.
func readSmall(path, what string, limit int64) ([]byte, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > limit {
		return nil, fmt.Errorf("%w: %s: %d bytes, more than any %s (%d MiB)", ErrBadFile, path, size, what, limit>>20)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadFile, path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s: grew past %d MiB while read", ErrBadFile, path, limit>>20)
	}
	return b, nil
}
