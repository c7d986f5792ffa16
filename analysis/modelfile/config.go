package modelfile

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// maxConfigJSON bounds a config.json: a model's is kilobytes, the
// largest (label maps, multimodal sub-configs) under a megabyte.
const maxConfigJSON = 8 << 20

// dtypeBytes are the sizes of the dtypes config.json and safetensors name.
var dtypeBytes = map[string]float64{
	"float32": 4, "float": 4, "fp32": 4, "f32": 4,
	"float16": 2, "half": 2, "fp16": 2, "f16": 2, "bfloat16": 2, "bf16": 2,
	"float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1, "f8_e4m3": 1, "f8_e5m2": 1, "f8_e8m0": 1,
	"float64": 8, "f64": 8, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8, "bool": 1,
	"f4": 0.5, "f6_e2m3": 0.75, "f6_e3m2": 0.75,
}

// hfConfig is the part of a Hugging Face config.json the roofline reads;
// names vary by architecture (GPT-2's n_layer, Falcon's num_kv_heads...).
type hfConfig struct {
	ModelType  string           `json:"model_type"`
	TextConfig *json.RawMessage `json:"text_config"`

	Layers      *float64 `json:"num_hidden_layers"`
	NLayer      *float64 `json:"n_layer"`
	NumLayers   *float64 `json:"num_layers"`
	Heads       *float64 `json:"num_attention_heads"`
	NHead       *float64 `json:"n_head"`
	KVHeads     *float64 `json:"num_key_value_heads"`
	NumKVHeads  *float64 `json:"num_kv_heads"`
	MultiQuery  *bool    `json:"multi_query"`
	HeadDim     *float64 `json:"head_dim"`
	Hidden      *float64 `json:"hidden_size"`
	NEmbd       *float64 `json:"n_embd"`
	Vocab       *float64 `json:"vocab_size"`
	Tie         *bool    `json:"tie_word_embeddings"`
	LocalExp    *float64 `json:"num_local_experts"`
	NumExperts  *float64 `json:"num_experts"`
	Routed      *float64 `json:"n_routed_experts"`
	PerTok      *float64 `json:"num_experts_per_tok"`
	KVLoraRank  *float64 `json:"kv_lora_rank"`
	RopeHeadDim *float64 `json:"qk_rope_head_dim"`
	TorchDType  string   `json:"torch_dtype"`
	DType       string   `json:"dtype"`
	Quant       *struct {
		Method string  `json:"quant_method"`
		Bits   float64 `json:"bits"`
		Format string  `json:"fmt"`
	} `json:"quantization_config"`
}

func first(ps ...*float64) float64 {
	for _, p := range ps {
		if p != nil {
			return *p
		}
	}
	return 0
}

// ReadConfig reads a Hugging Face config.json. It knows no parameter
// count (give it, or a weights file); it gives the KV shape, experts,
// dtype and the input embedding's size when untied.
func ReadConfig(path string) (Facts, error) {
	b, err := readSmall(path, "config.json", maxConfigJSON)
	if err != nil {
		return Facts{}, err
	}
	f, err := parseConfig(b)
	if err != nil {
		return Facts{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func parseConfig(b []byte) (Facts, error) {
	var c hfConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return Facts{}, fmt.Errorf("%w: config.json: %w", ErrBadFile, err)
	}
	if c.TextConfig != nil && first(c.Layers, c.NLayer, c.NumLayers) == 0 {
		// A multimodal model: the language model's numbers are nested.
		var t hfConfig
		if err := json.Unmarshal(*c.TextConfig, &t); err != nil {
			return Facts{}, fmt.Errorf("%w: config.json text_config: %w", ErrBadFile, err)
		}
		if t.TorchDType == "" && t.DType == "" {
			t.TorchDType, t.DType = c.TorchDType, c.DType
		}
		if t.Tie == nil {
			t.Tie = c.Tie
		}
		if t.Quant == nil {
			t.Quant = c.Quant
		}
		c = t
	}
	f := Facts{Source: "config.json", Architecture: c.ModelType, EmbedIncluded: true}
	vals := map[string]float64{
		"num_hidden_layers": first(c.Layers, c.NLayer, c.NumLayers), "num_attention_heads": first(c.Heads, c.NHead),
		"num_key_value_heads": first(c.KVHeads, c.NumKVHeads), "head_dim": first(c.HeadDim),
		"hidden_size": first(c.Hidden, c.NEmbd), "vocab_size": first(c.Vocab),
		"experts": first(c.LocalExp, c.Routed, c.NumExperts), "num_experts_per_tok": first(c.PerTok),
		"kv_lora_rank": first(c.KVLoraRank), "qk_rope_head_dim": first(c.RopeHeadDim),
	}
	for k, v := range vals {
		if v < 0 || v > 1e7 || v != math.Trunc(v) {
			return Facts{}, fmt.Errorf("%w: config.json %s = %v", ErrBadFile, k, v)
		}
	}
	heads, hidden := int(vals["num_attention_heads"]), int(vals["hidden_size"])
	f.Layers = int(vals["num_hidden_layers"])
	f.KVHeads = int(vals["num_key_value_heads"])
	if f.KVHeads == 0 {
		f.KVHeads = heads // multi-head attention: as many KV heads as heads
		if c.MultiQuery != nil && *c.MultiQuery {
			f.KVHeads = 1
		}
	}
	f.HeadDim = int(vals["head_dim"])
	if f.HeadDim == 0 && heads > 0 && hidden%heads == 0 {
		f.HeadDim = hidden / heads
	}
	if rank := int(vals["kv_lora_rank"]); rank > 0 {
		// MLA caches one latent of kv_lora_rank + the RoPE key per token
		// and layer, shared by all heads and whole on every TP rank: as
		// K+V of one head it is (rank + rope) / 2 wide.
		f.KVHeads, f.HeadDim, f.KVReplicated = 1, (rank+int(vals["qk_rope_head_dim"])+1)/2, true
	}
	f.Experts, f.ExpertsUsed = int(vals["experts"]), int(vals["num_experts_per_tok"])
	if f.Experts == 0 || f.ExpertsUsed == 0 {
		f.Experts, f.ExpertsUsed = 0, 0
	} else if f.ExpertsUsed > f.Experts {
		return Facts{}, fmt.Errorf("%w: config.json: %d experts per token of %d", ErrBadFile, f.ExpertsUsed, f.Experts)
	}
	dt := strings.ToLower(c.TorchDType)
	if dt == "" {
		dt = strings.ToLower(c.DType)
	}
	if dt != "" {
		bpw, ok := dtypeBytes[dt]
		if !ok {
			return Facts{}, fmt.Errorf("%w: config.json dtype %q unknown", ErrBadFile, dt)
		}
		f.BytesPerWeight, f.KVBytes = bpw, bpw
	}
	if q := c.Quant; q != nil {
		switch {
		case strings.EqualFold(q.Method, "fp8") || strings.Contains(strings.ToLower(q.Format), "e4m3"):
			f.BytesPerWeight = 1
		case q.Bits > 0 && q.Bits <= 16:
			f.BytesPerWeight = q.Bits / 8 // GPTQ/AWQ: scales not counted (a weights file says them)
		}
	}
	// transformers' default ties the embeddings; most configs say.
	f.Tied = c.Tie == nil || *c.Tie
	if !f.Tied {
		f.EmbedParams = vals["vocab_size"] * float64(hidden)
	}
	return f, nil
}
