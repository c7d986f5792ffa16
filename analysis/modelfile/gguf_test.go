package modelfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// ggufWriter builds GGUF headers for the tests: tensor data is zeros.
type ggufWriter struct {
	kv      bytes.Buffer
	nkv     uint64
	tensors []tensorSpec
}

type tensorSpec struct {
	name string
	dims []uint64
	typ  uint32
}

func wstr(b *bytes.Buffer, s string) {
	binary.Write(b, binary.LittleEndian, uint64(len(s)))
	b.WriteString(s)
}

func (w *ggufWriter) u32(k string, v uint32) {
	wstr(&w.kv, k)
	binary.Write(&w.kv, binary.LittleEndian, uint32(gUint32))
	binary.Write(&w.kv, binary.LittleEndian, v)
	w.nkv++
}

func (w *ggufWriter) str(k, v string) {
	wstr(&w.kv, k)
	binary.Write(&w.kv, binary.LittleEndian, uint32(gString))
	wstr(&w.kv, v)
	w.nkv++
}

func (w *ggufWriter) strArray(k string, vs []string) {
	wstr(&w.kv, k)
	binary.Write(&w.kv, binary.LittleEndian, uint32(gArray))
	binary.Write(&w.kv, binary.LittleEndian, uint32(gString))
	binary.Write(&w.kv, binary.LittleEndian, uint64(len(vs)))
	for _, v := range vs {
		wstr(&w.kv, v)
	}
	w.nkv++
}

func (w *ggufWriter) bytes() []byte {
	var b bytes.Buffer
	b.WriteString("GGUF")
	binary.Write(&b, binary.LittleEndian, uint32(3))
	binary.Write(&b, binary.LittleEndian, uint64(len(w.tensors)))
	binary.Write(&b, binary.LittleEndian, w.nkv)
	b.Write(w.kv.Bytes())
	var off uint64
	sizes := make([]uint64, len(w.tensors))
	for i, t := range w.tensors {
		wstr(&b, t.name)
		binary.Write(&b, binary.LittleEndian, uint32(len(t.dims)))
		n := uint64(1)
		for _, d := range t.dims {
			binary.Write(&b, binary.LittleEndian, d)
			n *= d
		}
		binary.Write(&b, binary.LittleEndian, t.typ)
		binary.Write(&b, binary.LittleEndian, off)
		ty := ggmlTypes[t.typ]
		sizes[i] = n / ty.block * ty.bytes
		off += (sizes[i] + 31) / 32 * 32
	}
	for b.Len()%32 != 0 {
		b.WriteByte(0)
	}
	b.Write(make([]byte, off))
	return b.Bytes()
}

// tinyLlama is a 2-layer llama with Q4_0 body, Q6_K embedding, F32 norms.
func tinyLlama(tied bool) *ggufWriter {
	w := &ggufWriter{}
	w.str("general.architecture", "llama")
	w.str("general.name", "tiny")
	w.u32("llama.block_count", 2)
	w.u32("llama.embedding_length", 256)
	w.u32("llama.attention.head_count", 8)
	w.u32("llama.attention.head_count_kv", 2)
	w.strArray("tokenizer.ggml.tokens", []string{"a", "b", "c"})
	w.tensors = append(w.tensors, tensorSpec{"token_embd.weight", []uint64{256, 1024}, 14})
	if !tied {
		w.tensors = append(w.tensors, tensorSpec{"output.weight", []uint64{256, 1024}, 14})
	}
	for i := range 2 {
		p := "blk." + string(rune('0'+i)) + "."
		w.tensors = append(w.tensors,
			tensorSpec{p + "attn_norm.weight", []uint64{256}, 0},
			tensorSpec{p + "attn_q.weight", []uint64{256, 256}, 2},
			tensorSpec{p + "attn_k.weight", []uint64{256, 64}, 2},
			tensorSpec{p + "attn_v.weight", []uint64{256, 64}, 2},
			tensorSpec{p + "ffn_up.weight", []uint64{256, 512}, 2})
	}
	return w
}

func TestGGUFRealBytes(t *testing.T) {
	b := tinyLlama(false).bytes()
	f, err := parseGGUF(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	body := 2.0 * (256 + 256*256 + 2*256*64 + 256*512)
	bodyBytes := 2.0 * (256*4 + (256*256+2*256*64+256*512)/32*18)
	lm := 256.0 * 1024
	if f.Params != body+lm || f.WeightBytes != bodyBytes+lm/256*210 {
		t.Errorf("params %g bytes %g, want %g %g", f.Params, f.WeightBytes, body+lm, bodyBytes+lm/256*210)
	}
	if f.EmbedParams != lm || f.Tied || f.Layers != 2 || f.KVHeads != 2 || f.HeadDim != 32 || f.KVBytes != 2 || f.Name != "tiny" {
		t.Errorf("%+v", f)
	}
	// Q4_0 is 4.5 bits: the body's bytes per weight say so.
	q := 2.0 * (256*256 + 2*256*64 + 256*512)
	if got := (bodyBytes - 2*256*4) / q; got != 18.0/32 {
		t.Errorf("Q4_0 bytes per weight %g", got)
	}
	// Tied: the embedding is the LM head, streamed, so counted.
	b = tinyLlama(true).bytes()
	f, err = parseGGUF(bytes.NewReader(b), int64(len(b)))
	if err != nil || !f.Tied || f.Params != body+lm || f.EmbedParams != 0 {
		t.Errorf("tied: %+v %v", f, err)
	}
}

func TestGGUFExperts(t *testing.T) {
	w := &ggufWriter{}
	w.str("general.architecture", "qwen3moe")
	w.u32("qwen3moe.block_count", 1)
	w.u32("qwen3moe.embedding_length", 64)
	w.u32("qwen3moe.attention.head_count", 4)
	w.u32("qwen3moe.attention.head_count_kv", 4)
	w.u32("qwen3moe.attention.key_length", 32)
	w.u32("qwen3moe.attention.value_length", 32)
	w.u32("qwen3moe.expert_count", 8)
	w.u32("qwen3moe.expert_used_count", 2)
	w.tensors = []tensorSpec{
		{"blk.0.attn_q.weight", []uint64{64, 128}, 1},
		{"blk.0.ffn_up_exps.weight", []uint64{64, 32, 8}, 1},
		{"blk.0.ffn_down_exps.weight", []uint64{32, 64, 8}, 1},
	}
	b := w.bytes()
	f, err := parseGGUF(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Experts != 8 || f.ExpertsUsed != 2 || f.ExpertParams != 2*64*32*8 || f.HeadDim != 32 || !f.Tied {
		t.Fatalf("%+v", f)
	}
	m := f.Model()
	want := f.Params - f.ExpertParams*0.75
	if m.ActiveParams != want || m.WeightBytes != 2*f.Params {
		t.Errorf("active %g want %g; bytes %g", m.ActiveParams, want, m.WeightBytes)
	}
}

func TestGGUFBadInput(t *testing.T) {
	good := tinyLlama(false).bytes()
	cases := map[string][]byte{
		"empty":       nil,
		"magic":       append([]byte("GGML"), good[4:]...),
		"version 1":   patch(good, 4, le32(1)),
		"version 99":  patch(good, 4, le32(99)),
		"big-endian":  patch(good, 4, []byte{0, 0, 0, 3}),
		"huge counts": patch(good, 8, le64(1<<40)),
		"huge kvs":    patch(good, 16, le64(1<<40)),
		"huge string": patch(good, 24, le64(1<<62)),
		"no arch":     (&ggufWriter{tensors: []tensorSpec{{"x", []uint64{32}, 0}}}).bytes(),
	}
	// Truncations: inside the magic, the counts, a key, the tensor table
	// and the data.
	for _, n := range []int{3, 10, 30, 200, len(good) / 2, len(good) - 1} {
		cases["truncated at "+strconv.Itoa(n)] = good[:n]
	}
	odd := &ggufWriter{}
	odd.str("general.architecture", "llama")
	odd.tensors = []tensorSpec{{"x", []uint64{33}, 2}}
	cases["partial block"] = odd.bytes()
	cases["absurd dims"] = absurdDims()
	cases["absurd layers"] = func() []byte {
		w := tinyLlama(false)
		w.u32("llama.expert_count", 1)
		w.u32("llama.expert_used_count", 4)
		return w.bytes()
	}()
	for name, b := range cases {
		_, err := parseGGUF(bytes.NewReader(b), int64(len(b)))
		if !errors.Is(err, ErrBadFile) {
			t.Errorf("%s: %v, want ErrBadFile", name, err)
		}
	}
}

func absurdDims() []byte {
	w := &ggufWriter{}
	w.str("general.architecture", "llama")
	w.tensors = []tensorSpec{{"x", []uint64{1 << 30, 1 << 30}, 0}}
	var b bytes.Buffer
	b.WriteString("GGUF")
	binary.Write(&b, binary.LittleEndian, uint32(3))
	binary.Write(&b, binary.LittleEndian, uint64(1))
	binary.Write(&b, binary.LittleEndian, w.nkv)
	b.Write(w.kv.Bytes())
	wstr(&b, "x")
	binary.Write(&b, binary.LittleEndian, uint32(2))
	binary.Write(&b, binary.LittleEndian, uint64(1<<30))
	binary.Write(&b, binary.LittleEndian, uint64(1<<30))
	binary.Write(&b, binary.LittleEndian, uint32(0))
	binary.Write(&b, binary.LittleEndian, uint64(0))
	return b.Bytes()
}

func patch(b []byte, at int, with []byte) []byte {
	c := append([]byte(nil), b...)
	copy(c[at:], with)
	return c
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func TestReadGGUFFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, tinyLlama(false).bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Read(p)
	if err != nil || f.Architecture != "llama" {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none.gguf")); !errors.Is(err, ErrBadFile) {
		t.Errorf("missing file: %v", err)
	}
}

// FuzzParseGGUF: any bytes give facts or ErrBadFile, never a panic, a
// hang or a huge allocation.
func FuzzParseGGUF(f *testing.F) {
	f.Add(tinyLlama(false).bytes())
	f.Add(tinyLlama(true).bytes()[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		facts, err := parseGGUF(bytes.NewReader(b), int64(len(b)))
		if err != nil && !errors.Is(err, ErrBadFile) {
			t.Fatalf("error not ErrBadFile: %v", err)
		}
		if err == nil && (facts.Params <= 0 || math.IsNaN(facts.WeightBytes)) {
			t.Fatalf("facts without params: %+v", facts)
		}
	})
}

// testdata/tiny-q4.gguf is tinyLlama(false) written out: the file other
// packages' tests read.
func TestGGUFFixtureFile(t *testing.T) {
	b, err := os.ReadFile("testdata/tiny-q4.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, tinyLlama(false).bytes()) {
		t.Fatal("testdata/tiny-q4.gguf is not tinyLlama(false): regenerate it")
	}
}
