package modelfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// ErrBadFile marks a model file whose header cannot be read: truncated,
// not the format, or with counts or sizes past what any real file has.
var ErrBadFile = errors.New("model file")

// GGUF header limits: past these a header is corrupt or hostile, and
// reading on would allocate or loop without end.
const (
	maxTensors   = 1 << 20
	maxKVs       = 1 << 20
	maxString    = 64 << 20 // a chat template or merges string
	maxArray     = 1 << 28
	maxDims      = 8
	ggufMinVer   = 2
	ggufMaxVer   = 3
	ggufDefAlign = 32
)

// ggmlType is one ggml tensor type's block: elements per block and bytes
// per block (scales included: Q4_0 is 32 weights in 18 bytes, 4.5 bits).
type ggmlType struct {
	name  string
	block uint64
	bytes uint64
}

// ggmlTypes are ggml's types by number (ggml.h, ggml_type_traits).
var ggmlTypes = map[uint32]ggmlType{
	0: {"F32", 1, 4}, 1: {"F16", 1, 2}, 2: {"Q4_0", 32, 18}, 3: {"Q4_1", 32, 20},
	6: {"Q5_0", 32, 22}, 7: {"Q5_1", 32, 24}, 8: {"Q8_0", 32, 34}, 9: {"Q8_1", 32, 36},
	10: {"Q2_K", 256, 84}, 11: {"Q3_K", 256, 110}, 12: {"Q4_K", 256, 144}, 13: {"Q5_K", 256, 176},
	14: {"Q6_K", 256, 210}, 15: {"Q8_K", 256, 292}, 16: {"IQ2_XXS", 256, 66}, 17: {"IQ2_XS", 256, 74},
	18: {"IQ3_XXS", 256, 98}, 19: {"IQ1_S", 256, 50}, 20: {"IQ4_NL", 32, 18}, 21: {"IQ3_S", 256, 110},
	22: {"IQ2_S", 256, 82}, 23: {"IQ4_XS", 256, 136}, 24: {"I8", 1, 1}, 25: {"I16", 1, 2},
	26: {"I32", 1, 4}, 27: {"I64", 1, 8}, 28: {"F64", 1, 8}, 29: {"IQ1_M", 256, 56},
	30: {"BF16", 1, 2}, 34: {"TQ1_0", 256, 54}, 35: {"TQ2_0", 256, 66}, 39: {"MXFP4", 32, 17},
}

// GGUF value types.
const (
	gUint8 = iota
	gInt8
	gUint16
	gInt16
	gUint32
	gInt32
	gFloat32
	gBool
	gString
	gArray
	gUint64
	gInt64
	gFloat64
)

var scalarSize = map[uint32]int{gUint8: 1, gInt8: 1, gUint16: 2, gInt16: 2, gUint32: 4, gInt32: 4,
	gFloat32: 4, gBool: 1, gUint64: 8, gInt64: 8, gFloat64: 8}

type ggufReader struct {
	r   *bufio.Reader
	err error
	pos int64
}

func (g *ggufReader) read(n int) []byte {
	if g.err != nil {
		return nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(g.r, b); err != nil {
		g.err = fmt.Errorf("%w: truncated at byte %d: %w", ErrBadFile, g.pos, err)
		return nil
	}
	g.pos += int64(n)
	return b
}

func (g *ggufReader) skip(n int64) {
	if g.err != nil {
		return
	}
	if _, err := g.r.Discard(int(n)); err != nil {
		g.err = fmt.Errorf("%w: truncated at byte %d: %w", ErrBadFile, g.pos, err)
	}
	g.pos += n
}

func (g *ggufReader) u32() uint32 {
	b := g.read(4)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

func (g *ggufReader) u64() uint64 {
	b := g.read(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

func (g *ggufReader) str() string {
	n := g.u64()
	if g.err != nil {
		return ""
	}
	if n > maxString {
		g.err = fmt.Errorf("%w: a %d-byte string at byte %d", ErrBadFile, n, g.pos)
		return ""
	}
	return string(g.read(int(n)))
}

// value reads one value of type t: numbers as float64 (ok), strings,
// arrays of numbers as []float64 (arrays of strings are skipped).
func (g *ggufReader) value(t uint32, depth int) any {
	if g.err != nil {
		return nil
	}
	switch t {
	case gString:
		return g.str()
	case gArray:
		et, n := g.u32(), g.u64()
		if g.err != nil {
			return nil
		}
		if n > maxArray || depth > 2 {
			g.err = fmt.Errorf("%w: an array of %d at byte %d", ErrBadFile, n, g.pos)
			return nil
		}
		if sz, ok := scalarSize[et]; ok {
			if n > 4096 { // a tokenizer's scores or types: not needed
				g.skip(int64(n) * int64(sz))
				return nil
			}
			out := make([]float64, 0, n)
			for range n {
				v, _ := g.value(et, depth+1).(float64)
				out = append(out, v)
			}
			return out
		}
		for i := uint64(0); i < n && g.err == nil; i++ {
			g.value(et, depth+1)
		}
		return nil
	}
	sz, ok := scalarSize[t]
	if !ok {
		g.err = fmt.Errorf("%w: unknown value type %d at byte %d", ErrBadFile, t, g.pos)
		return nil
	}
	b := g.read(sz)
	if b == nil {
		return nil
	}
	switch t {
	case gUint8, gBool:
		return float64(b[0])
	case gInt8:
		return float64(int8(b[0]))
	case gUint16:
		return float64(binary.LittleEndian.Uint16(b))
	case gInt16:
		return float64(int16(binary.LittleEndian.Uint16(b)))
	case gUint32:
		return float64(binary.LittleEndian.Uint32(b))
	case gInt32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case gFloat32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case gUint64:
		return float64(binary.LittleEndian.Uint64(b))
	case gInt64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// ReadGGUF reads a GGUF file's header: its architecture keys and tensor
// table, not its weights.
func ReadGGUF(path string) (Facts, error) {
	f, size, err := openRegular(path)
	if err != nil {
		return Facts{}, err
	}
	defer f.Close()
	facts, err := parseGGUF(f, size)
	if err != nil {
		return Facts{}, fmt.Errorf("%s: %w", path, err)
	}
	return facts, nil
}

type tensorInfo struct {
	name   string
	elems  uint64
	bytes  uint64
	offset uint64
}

func parseGGUF(r io.Reader, size int64) (Facts, error) {
	g := &ggufReader{r: bufio.NewReaderSize(r, 1<<16)}
	if m := g.read(4); g.err != nil || string(m) != "GGUF" {
		if g.err != nil {
			return Facts{}, g.err
		}
		return Facts{}, fmt.Errorf("%w: not GGUF (magic %q)", ErrBadFile, m)
	}
	ver := g.u32()
	nt, nkv := g.u64(), g.u64()
	if g.err != nil {
		return Facts{}, g.err
	}
	if ver < ggufMinVer || ver > ggufMaxVer {
		return Facts{}, fmt.Errorf("%w: GGUF version %d (this reader knows %d..%d, little-endian)", ErrBadFile, ver, ggufMinVer, ggufMaxVer)
	}
	if nt > maxTensors || nkv > maxKVs {
		return Facts{}, fmt.Errorf("%w: %d tensors and %d keys: more than any model has", ErrBadFile, nt, nkv)
	}
	kv := make(map[string]any, 64)
	for i := uint64(0); i < nkv && g.err == nil; i++ {
		k := g.str()
		t := g.u32()
		v := g.value(t, 0)
		if g.err == nil && v != nil && !strings.HasPrefix(k, "tokenizer.") {
			kv[k] = v
		}
	}
	tensors := make([]tensorInfo, 0, min(nt, 4096))
	for i := uint64(0); i < nt && g.err == nil; i++ {
		name := g.str()
		nd := g.u32()
		if g.err != nil {
			break
		}
		if nd == 0 || nd > maxDims {
			return Facts{}, fmt.Errorf("%w: tensor %q has %d dimensions", ErrBadFile, name, nd)
		}
		elems := uint64(1)
		for range nd {
			d := g.u64()
			if d == 0 || elems > math.MaxUint64/d || elems*d > 1<<48 {
				if g.err != nil {
					break
				}
				return Facts{}, fmt.Errorf("%w: tensor %q has an absurd shape (dimension %d)", ErrBadFile, name, d)
			}
			elems *= d
		}
		tt, off := g.u32(), g.u64()
		if g.err != nil {
			break
		}
		ty, ok := ggmlTypes[tt]
		if !ok {
			return Facts{}, fmt.Errorf("%w: tensor %q has unknown ggml type %d", ErrBadFile, name, tt)
		}
		if elems%ty.block != 0 {
			return Facts{}, fmt.Errorf("%w: tensor %q: %d elements are not whole %s blocks of %d", ErrBadFile, name, elems, ty.name, ty.block)
		}
		tensors = append(tensors, tensorInfo{name: name, elems: elems, bytes: elems / ty.block * ty.bytes, offset: off})
	}
	if g.err != nil {
		return Facts{}, g.err
	}
	align := uint64(ggufDefAlign)
	if a, ok := kv["general.alignment"].(float64); ok {
		if a < 1 || a > 1<<16 || uint64(a)&(uint64(a)-1) != 0 {
			return Facts{}, fmt.Errorf("%w: alignment %v", ErrBadFile, a)
		}
		align = uint64(a)
	}
	data := (uint64(g.pos) + align - 1) / align * align
	for _, t := range tensors {
		if end := data + t.offset + t.bytes; t.offset > uint64(size) || end > uint64(size) {
			return Facts{}, fmt.Errorf("%w: tensor %q ends at byte %d, past the file's %d (truncated?)", ErrBadFile, t.name, end, size)
		}
	}
	return ggufFacts(kv, tensors)
}

func num(kv map[string]any, key string) (float64, bool) {
	switch v := kv[key].(type) {
	case float64:
		return v, true
	case []float64: // per-layer values: the largest
		if len(v) == 0 {
			return 0, false
		}
		m := v[0]
		for _, x := range v {
			m = math.Max(m, x)
		}
		return m, true
	}
	return 0, false
}

func intKey(kv map[string]any, key string) (int, error) {
	v, ok := num(kv, key)
	if !ok {
		return 0, nil
	}
	if v < 0 || v > 1e7 || v != math.Trunc(v) {
		return 0, fmt.Errorf("%w: %s = %v", ErrBadFile, key, v)
	}
	return int(v), nil
}

func ggufFacts(kv map[string]any, tensors []tensorInfo) (Facts, error) {
	arch, _ := kv["general.architecture"].(string)
	if arch == "" {
		return Facts{}, fmt.Errorf("%w: no general.architecture", ErrBadFile)
	}
	f := Facts{Architecture: arch, Source: "gguf", KVBytes: 2}
	if n, ok := kv["general.name"].(string); ok {
		f.Name = n
	}
	var err error
	get := func(key string) int {
		if err != nil {
			return 0
		}
		var v int
		v, err = intKey(kv, arch+"."+key)
		return v
	}
	f.Layers = get("block_count")
	heads := get("attention.head_count")
	f.KVHeads = get("attention.head_count_kv")
	embd := get("embedding_length")
	kdim, vdim := get("attention.key_length"), get("attention.value_length")
	f.Experts = get("expert_count")
	f.ExpertsUsed = get("expert_used_count")
	if err != nil {
		return Facts{}, err
	}
	if f.KVHeads == 0 {
		f.KVHeads = heads
	}
	switch {
	case kdim > 0 && vdim > 0:
		f.HeadDim = (kdim + vdim) / 2
	case kdim > 0:
		f.HeadDim = kdim
	case heads > 0 && embd%heads == 0:
		f.HeadDim = embd / heads
	}
	var total, totalBytes, embed, embedBytes, expert uint64
	var lmHead bool
	for _, t := range tensors {
		total += t.elems
		totalBytes += t.bytes
		switch {
		case t.name == "token_embd.weight":
			embed, embedBytes = t.elems, t.bytes
		case t.name == "output.weight":
			lmHead = true
		case strings.Contains(t.name, "_exps."):
			expert += t.elems
		}
	}
	if total == 0 {
		return Facts{}, fmt.Errorf("%w: no tensors", ErrBadFile)
	}
	f.Tied = !lmHead
	if lmHead { // the input embedding is gathered, not streamed: left out
		total -= embed
		totalBytes -= embedBytes
		f.EmbedParams = float64(embed)
	}
	f.Params = float64(total)
	f.WeightBytes = float64(totalBytes)
	if f.ExpertsUsed > f.Experts {
		return Facts{}, fmt.Errorf("%w: %d experts used of %d", ErrBadFile, f.ExpertsUsed, f.Experts)
	}
	f.ExpertParams = float64(expert)
	return f, nil
}
