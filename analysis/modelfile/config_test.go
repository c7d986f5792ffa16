package modelfile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestConfigs(t *testing.T) {
	cases := []struct {
		file                     string
		layers, kvHeads, headDim int
		experts, used            int
		bpw, kvb, embed          float64
		tied, replicated         bool
		kvPerToken               float64
	}{
		// Llama-3-8B: 128 KiB of BF16 KV a token, untied 128256 × 4096.
		{"llama3-8b", 32, 8, 128, 0, 0, 2, 2, 128256 * 4096, false, false, 131072},
		{"mixtral-8x7b", 32, 8, 128, 8, 2, 2, 2, 32000 * 4096, false, false, 131072},
		// DeepSeek-V3's MLA: 61 × (512 + 64) latent values a token, FP8
		// weights, the KV at the BF16 dtype.
		{"deepseek-v3", 61, 1, 288, 256, 8, 1, 2, 129280 * 7168, false, true, 61 * 576 * 2},
		// Gemma 3: the language model nested in text_config, tied.
		{"gemma3-4b", 34, 4, 256, 0, 0, 2, 2, 0, true, false, 2 * 34 * 4 * 256 * 2},
		// GPT-2's own names; no dtype (unknown, 0), tied by default.
		{"gpt2", 12, 12, 64, 0, 0, 0, 0, 0, true, false, 0},
	}
	for _, c := range cases {
		f, err := ReadConfig(filepath.Join("testdata", c.file+".config.json"))
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		if f.Layers != c.layers || f.KVHeads != c.kvHeads || f.HeadDim != c.headDim || f.Experts != c.experts ||
			f.ExpertsUsed != c.used || f.BytesPerWeight != c.bpw || f.KVBytes != c.kvb || f.EmbedParams != c.embed ||
			f.Tied != c.tied || f.KVReplicated != c.replicated || !f.EmbedIncluded {
			t.Errorf("%s: %+v", c.file, f)
		}
		if m := f.Model(); c.kvb > 0 && m.KVBytesPerToken() != c.kvPerToken {
			t.Errorf("%s: kv per token %g, want %g", c.file, m.KVBytesPerToken(), c.kvPerToken)
		}
	}
}

func TestConfigBad(t *testing.T) {
	for name, s := range map[string]string{
		"not json":        `{"num_hidden_layers": `,
		"negative layers": `{"num_hidden_layers": -2}`,
		"fraction heads":  `{"num_attention_heads": 2.5}`,
		"absurd":          `{"num_hidden_layers": 1e12}`,
		"per tok > all":   `{"num_local_experts": 2, "num_experts_per_tok": 4}`,
		"unknown dtype":   `{"torch_dtype": "float7"}`,
		"text_config bad": `{"text_config": 3}`,
	} {
		if _, err := parseConfig([]byte(s)); !errors.Is(err, ErrBadFile) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// safetensors writes a safetensors file of the given tensors (data zeros).
func safetensors(t *testing.T, path string, tensors map[string][]uint64, dtype string, size uint64) {
	t.Helper()
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off uint64
	for name, shape := range tensors {
		n := uint64(1)
		for _, d := range shape {
			n *= d
		}
		hdr[name] = map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []uint64{off, off + n*size}}
		off += n * size
	}
	h, _ := json.Marshal(hdr)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(h)))
	b.Write(h)
	b.Write(make([]byte, off))
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestSafetensorsWithConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := os.ReadFile("testdata/mixtral-8x7b.config.json")
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o600)
	safetensors(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), map[string][]uint64{
		"model.embed_tokens.weight": {100, 16},
		"lm_head.weight":            {100, 16},
	}, "BF16", 2)
	shard2 := map[string][]uint64{"model.layers.0.self_attn.q_proj.weight": {16, 16}}
	for e := range 8 {
		shard2["model.layers.0.block_sparse_moe.experts."+string(rune('0'+e))+".w1.weight"] = []uint64{32, 16}
	}
	safetensors(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), shard2, "BF16", 2)
	idx := map[string]any{"weight_map": map[string]string{
		"model.embed_tokens.weight":              "model-00001-of-00002.safetensors",
		"lm_head.weight":                         "model-00001-of-00002.safetensors",
		"model.layers.0.self_attn.q_proj.weight": "model-00002-of-00002.safetensors",
	}}
	ib, _ := json.Marshal(idx)
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), ib, 0o600)
	f, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	streamed := 1600.0 + 256 + 8*512 // LM head, q_proj, experts; not the embedding
	if f.Params != streamed || f.WeightBytes != 2*streamed || f.EmbedParams != 1600 || f.ExpertParams != 8*512 {
		t.Fatalf("%+v", f)
	}
	m := f.Model()
	if m.Experts != 8 || m.ExpertsUsed != 2 || m.ActiveParams != streamed-8*512*0.75 || m.EmbedParams != 0 || m.Layers != 32 {
		t.Errorf("%+v", m)
	}
}

func TestSafetensorsBad(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o600)
		return p
	}
	hdr := func(s string, extra int) []byte {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, uint64(len(s)))
		b.WriteString(s)
		b.Write(make([]byte, extra))
		return b.Bytes()
	}
	for name, b := range map[string][]byte{
		"short":          {1, 2},
		"huge header":    binary.LittleEndian.AppendUint64(nil, 1<<40),
		"not json":       hdr("{nope", 0),
		"past data":      hdr(`{"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}}`, 4),
		"unknown dtype":  hdr(`{"w":{"dtype":"Q9","shape":[4],"data_offsets":[0,8]}}`, 8),
		"no tensors":     hdr(`{"__metadata__":{}}`, 0),
		"reversed range": hdr(`{"w":{"dtype":"F16","shape":[4],"data_offsets":[8,0]}}`, 8),
	} {
		if _, err := ReadSafetensors(write(name+".safetensors", b)); !errors.Is(err, ErrBadFile) {
			t.Errorf("%s: %v", name, err)
		}
	}
	p := write("model.safetensors.index.json", []byte(`{"weight_map":{"w":"../../etc/passwd"}}`))
	if _, err := ReadSafetensorsIndex(p); !errors.Is(err, ErrBadFile) {
		t.Errorf("shard outside: %v", err)
	}
}

// Files that are not what their names say are refused with what they
// are, never read into a number: a FIFO (whose open would wait for a
// writer), a device, a config.json or index bigger than any, one cut
// short, a link loop where a model directory's file should be (not taken
// for one absent).
func TestHostileFiles(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	sparse := func(name string, size int64) string {
		f, err := os.Create(at(name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return at(name)
	}
	if err := syscall.Mkfifo(at("fifo.safetensors"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(at("config.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(at("cut.json"), []byte(`{"num_hidden_layers": 32, "num_attention_he`), 0o600)
	loopDir := at("loop")
	os.Mkdir(loopDir, 0o700)
	os.Symlink(filepath.Join(loopDir, "config.json"), filepath.Join(loopDir, "config.json"))
	os.Symlink(filepath.Join(dir, "self.gguf"), filepath.Join(dir, "self.gguf"))
	os.Symlink("/dev/zero", at("zero.gguf"))
	for _, c := range []struct {
		name, path, want string
	}{
		{"FIFO safetensors", at("fifo.safetensors"), "named pipe"},
		{"FIFO config.json", at("config.json"), "named pipe"},
		{"a device", at("zero.gguf"), "character device"},
		{"huge config.json", sparse("big.json", maxConfigJSON+1), "more than any config.json"},
		{"huge index", sparse("model.safetensors.index.json", maxSafetensorsIndex+1), "more than any safetensors index"},
		{"cut config.json", at("cut.json"), "unexpected end of JSON input"},
		{"a link loop in a directory", loopDir, "too many levels of symbolic links"},
		{"a link loop", at("self.gguf"), "too many levels of symbolic links"},
	} {
		f, err := Read(c.path)
		if !errors.Is(err, ErrBadFile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v, %v; want an error saying %q", c.name, f, err, c.want)
		}
	}
}
