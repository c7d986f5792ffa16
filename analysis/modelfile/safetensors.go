package modelfile

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
)

const maxSafetensorsHeader = 100 << 20 // the format's own limit

// maxSafetensorsIndex bounds a model.safetensors.index.json: the largest
// (DeepSeek-V3's, ninety thousand tensors) are some megabytes.
const maxSafetensorsIndex = 64 << 20

type stTensor struct {
	DType   string   `json:"dtype"`
	Shape   []uint64 `json:"shape"`
	Offsets []uint64 `json:"data_offsets"`
}

// expertOf returns the routed expert's index in a tensor name
// ("model.layers.0.mlp.experts.17.up_proj.weight"), or "".
func expertOf(name string) string {
	const mark = ".experts."
	i := strings.Index(name, mark)
	if i < 0 || strings.Contains(name, "shared_expert") {
		return ""
	}
	rest := name[i+len(mark):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if j == 0 || j == len(rest) || rest[j] != '.' {
		return ""
	}
	return rest[:j]
}

// ReadSafetensors reads one safetensors file's header: each tensor's
// dtype, shape and byte range.
func ReadSafetensors(path string) (Facts, error) {
	acc := newSTAcc()
	if err := acc.add(path); err != nil {
		return Facts{}, err
	}
	return acc.facts()
}

// ReadSafetensorsIndex reads every shard a model.safetensors.index.json
// names (their headers only).
func ReadSafetensorsIndex(path string) (Facts, error) {
	b, err := readSmall(path, "safetensors index", maxSafetensorsIndex)
	if err != nil {
		return Facts{}, err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return Facts{}, fmt.Errorf("%w: %s: %w", ErrBadFile, path, err)
	}
	shards := map[string]bool{}
	for _, s := range idx.WeightMap {
		if s != filepath.Base(s) || s == "" {
			return Facts{}, fmt.Errorf("%w: %s names shard %q outside its directory", ErrBadFile, path, s)
		}
		shards[s] = true
	}
	if len(shards) == 0 {
		return Facts{}, fmt.Errorf("%w: %s names no shards", ErrBadFile, path)
	}
	names := make([]string, 0, len(shards))
	for s := range shards {
		names = append(names, s)
	}
	sort.Strings(names)
	acc := newSTAcc()
	for _, s := range names {
		if err := acc.add(filepath.Join(filepath.Dir(path), s)); err != nil {
			return Facts{}, err
		}
	}
	return acc.facts()
}

type stAcc struct {
	params, bytes, embed, embedBytes, expert float64
	lmHead                                   bool
	experts                                  map[string]bool
}

func newSTAcc() *stAcc { return &stAcc{experts: map[string]bool{}} }

func (a *stAcc) add(path string) error {
	f, size, err := openRegular(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := a.parse(f, size); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (a *stAcc) parse(r io.Reader, size int64) error {
	var nb [8]byte
	if _, err := io.ReadFull(r, nb[:]); err != nil {
		return fmt.Errorf("%w: truncated safetensors (no header length): %w", ErrBadFile, err)
	}
	n := binary.LittleEndian.Uint64(nb[:])
	if n < 2 || n > maxSafetensorsHeader || int64(n) > size-8 {
		return fmt.Errorf("%w: safetensors header of %d bytes in a %d-byte file", ErrBadFile, n, size)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return fmt.Errorf("%w: truncated safetensors header: %w", ErrBadFile, err)
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return fmt.Errorf("%w: safetensors header: %w", ErrBadFile, err)
	}
	data := uint64(size) - 8 - n
	for name, raw := range hdr {
		if name == "__metadata__" {
			continue
		}
		var t stTensor
		if err := json.Unmarshal(raw, &t); err != nil {
			return fmt.Errorf("%w: tensor %q: %w", ErrBadFile, name, err)
		}
		if len(t.Offsets) != 2 || t.Offsets[1] < t.Offsets[0] || t.Offsets[1] > data {
			return fmt.Errorf("%w: tensor %q: data offsets %v outside the %d data bytes", ErrBadFile, name, t.Offsets, data)
		}
		if len(t.Shape) > maxDims {
			return fmt.Errorf("%w: tensor %q has %d dimensions", ErrBadFile, name, len(t.Shape))
		}
		if _, ok := dtypeBytes[strings.ToLower(t.DType)]; !ok {
			return fmt.Errorf("%w: tensor %q has unknown dtype %q", ErrBadFile, name, t.DType)
		}
		elems := 1.0
		for _, d := range t.Shape {
			elems *= float64(d)
		}
		if elems > 1<<48 {
			return fmt.Errorf("%w: tensor %q has an absurd shape %v", ErrBadFile, name, t.Shape)
		}
		bytes := float64(t.Offsets[1] - t.Offsets[0])
		a.params += elems
		a.bytes += bytes
		switch {
		case isEmbed(name):
			a.embed += elems
			a.embedBytes += bytes
		case strings.HasSuffix(name, "lm_head.weight") || name == "output.weight":
			a.lmHead = true
		}
		if e := expertOf(name); e != "" {
			a.expert += elems
			a.experts[e] = true
		}
	}
	return nil
}

func isEmbed(name string) bool {
	for _, s := range []string{"embed_tokens.weight", "wte.weight", "word_embeddings.weight", "tok_embeddings.weight"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

func (a *stAcc) facts() (Facts, error) {
	if a.params == 0 {
		return Facts{}, fmt.Errorf("%w: safetensors without tensors", ErrBadFile)
	}
	f := Facts{Source: "safetensors", Params: a.params, WeightBytes: a.bytes, ExpertParams: a.expert, Tied: !a.lmHead}
	if a.lmHead {
		f.Params -= a.embed
		f.WeightBytes -= a.embedBytes
		f.EmbedParams = a.embed
	}
	if len(a.experts) > 0 {
		f.Experts = len(a.experts) // the count; per token comes from config.json
	}
	return f, nil
}
