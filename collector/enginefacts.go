package collector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// EngineFacts is what an engine says of the model it serves, for the
// decode ceiling (daemon/modelfacts turns it into the roofline's facts,
// the configuration winning). Zero fields are not said.
type EngineFacts struct {
	// llama.cpp /props: the model file's path (its GGUF gives bytes and
	// architecture where readable), the context per slot and the slots.
	ModelPath string
	NCtx      int
	Slots     int
	// llama.cpp /v1/models meta: parameters, the weights' bytes, the
	// embedding width and vocabulary, the trained context.
	Params    float64
	SizeBytes float64
	NEmbd     int
	NVocab    int
	NCtxTrain int
	// vLLM: the KV cache's capacity in tokens and where it was read
	// ("log": "GPU KV cache size"; "cache_config_info": num_gpu_blocks ×
	// block_size, which undercounts hybrid-attention models, so the log
	// wins), its element type (cache_dtype) and the weights each GPU
	// holds ("Model loading took X GiB").
	KVTokens          float64
	KVTokensFrom      string
	KVDtype           string
	WeightBytesPerGPU float64
	// vLLM's and SGLang's start-up lines: the model as the server was
	// given it (a directory, a file or a Hugging Face repo id, as
	// logged: escapes are kept, for the reader to refuse), the line that
	// said it, and the revision and download directory said with it.
	// daemon/modelfacts finds and reads it.
	LoggedModel, LoggedModelFrom, LoggedRevision, LoggedDownloadDir string
}

// Said reports whether e says anything.
func (e EngineFacts) Said() bool { return e != EngineFacts{} }

// maxFactsBody bounds an engine's /props or /v1/models reply (its chat
// template is the bulk).
const maxFactsBody = 4 << 20

// ParseLlamaProps reads llama-server's /props.
func ParseLlamaProps(r io.Reader) (EngineFacts, error) {
	var p struct {
		ModelPath  string `json:"model_path"`
		TotalSlots int    `json:"total_slots"`
		Defaults   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if err := json.NewDecoder(io.LimitReader(r, maxFactsBody)).Decode(&p); err != nil {
		return EngineFacts{}, fmt.Errorf("/props: %w", err)
	}
	return EngineFacts{ModelPath: p.ModelPath, NCtx: p.Defaults.NCtx, Slots: p.TotalSlots}, nil
}

// ParseLlamaModels reads the meta of the first model of llama-server's
// /v1/models.
func ParseLlamaModels(r io.Reader) (EngineFacts, error) {
	var m struct {
		Data []struct {
			Meta *struct {
				NParams   float64 `json:"n_params"`
				Size      float64 `json:"size"`
				NEmbd     int     `json:"n_embd"`
				NVocab    int     `json:"n_vocab"`
				NCtxTrain int     `json:"n_ctx_train"`
			} `json:"meta"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(r, maxFactsBody)).Decode(&m); err != nil {
		return EngineFacts{}, fmt.Errorf("/v1/models: %w", err)
	}
	if len(m.Data) == 0 || m.Data[0].Meta == nil {
		return EngineFacts{}, nil
	}
	x := m.Data[0].Meta
	if x.NParams < 0 || x.Size < 0 {
		return EngineFacts{}, fmt.Errorf("/v1/models: meta n_params %v, size %v: negative", x.NParams, x.Size)
	}
	return EngineFacts{Params: x.NParams, SizeBytes: x.Size, NEmbd: x.NEmbd, NVocab: x.NVocab, NCtxTrain: x.NCtxTrain}, nil
}

var cacheInfoMark = []byte("vllm:cache_config_info{")

// CacheConfigInfo reads vLLM's vllm:cache_config_info labels from a
// metrics page: the KV capacity (num_gpu_blocks × block_size, of the
// first engine) and cache_dtype. ok is false when the page has none.
func CacheConfigInfo(page []byte) (e EngineFacts, ok bool) {
	i := bytes.Index(page, cacheInfoMark)
	if i < 0 {
		return e, false
	}
	line := page[i+len(cacheInfoMark):]
	if j := bytes.IndexByte(line, '}'); j >= 0 {
		line = line[:j]
	}
	labels := map[string]string{}
	for _, m := range labelRE.FindAllSubmatch(line, -1) {
		labels[string(m[1])] = string(m[2])
	}
	blocks, err1 := strconv.ParseFloat(labels["num_gpu_blocks"], 64)
	size, err2 := strconv.ParseFloat(labels["block_size"], 64)
	if err1 == nil && err2 == nil && blocks > 0 && size > 0 {
		e.KVTokens, e.KVTokensFrom = blocks*size, "cache_config_info"
	}
	if d := labels["cache_dtype"]; d != "" && d != "auto" {
		e.KVDtype = d
	}
	return e, true
}

var labelRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"`)

// vLLM's start-up lines that say the model's memory (V0 and V1 print
// both; V1 one "GPU KV cache size" per engine core, one "Model loading
// took" per worker: each GPU's share).
var (
	vllmWeightsRE = regexp.MustCompile(`Model loading took ([0-9.]+) GiB`)
	vllmKVRE      = regexp.MustCompile(`GPU KV cache size: ([0-9,]+) tokens`)
)

// VLLMFactLine reads one vLLM (or SGLang) start-up log line into e, and
// reports whether it was one of the lines that say a fact.
func VLLMFactLine(line string, e *EngineFacts) bool {
	if loggedModelLine(line, e) {
		return true
	}
	if m := vllmWeightsRE.FindStringSubmatch(line); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil && v > 0 {
			e.WeightBytesPerGPU = v * (1 << 30)
			return true
		}
	}
	if m := vllmKVRE.FindStringSubmatch(line); m != nil {
		if v, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64); err == nil && v > 0 {
			e.KVTokens, e.KVTokensFrom = v, "log"
			return true
		}
	}
	return false
}

// ProbeLlamaCpp asks llama-server beside its metrics URL for /props and
// /v1/models, within ctx and client's timeout; what either says is kept.
func ProbeLlamaCpp(ctx context.Context, client *http.Client, metricsURL string) (EngineFacts, error) {
	var out EngineFacts
	props, err := getJSON(ctx, client, metricsURL, "/props", ParseLlamaProps)
	if err == nil {
		out = props
	}
	models, err2 := getJSON(ctx, client, metricsURL, "/v1/models", ParseLlamaModels)
	if err2 == nil {
		out.Params, out.SizeBytes, out.NEmbd, out.NVocab, out.NCtxTrain = models.Params, models.SizeBytes, models.NEmbd, models.NVocab, models.NCtxTrain
	}
	if err != nil && err2 != nil {
		return out, fmt.Errorf("engine facts: %w; %w", err, err2)
	}
	return out, nil
}

func getJSON(ctx context.Context, client *http.Client, base, path string, parse func(io.Reader) (EngineFacts, error)) (EngineFacts, error) {
	u, err := url.Parse(base)
	if err != nil {
		return EngineFacts{}, err
	}
	u.Path, u.RawQuery = path, ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return EngineFacts{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return EngineFacts{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return EngineFacts{}, fmt.Errorf("%s: HTTP %s", path, resp.Status)
	}
	return parse(bufio.NewReader(resp.Body))
}

// The start-up lines that name the model the server loads, each with the
// key of the model (Python's repr of the engine's arguments), of its
// revision and of its download directory in that line's syntax.
var modelLines = []struct {
	mark, from     string
	models         []string
	rev, downloads string
}{
	// vLLM V0 and V1: "Initializing a V1 LLM engine (v0.8.3) with
	// config: model='/models/x', speculative_config=None, ...".
	{"with config: model=", "vLLM engine config", []string{"with config: model="}, ", revision=", ", download_dir="},
	// vLLM ≥ 0.9: "non-default args: {'model_tag': 'x', 'model': 'x'}".
	{"non-default args: {", "vLLM non-default args", []string{"'model': ", "'model_tag': "}, "'revision': ", "'download_dir': "},
	// vLLM < 0.9: "args: Namespace(subparser='serve', model_tag=...,
	// model='x', ...)".
	{"args: Namespace(", "vLLM args", []string{", model=", "model_tag="}, ", revision=", ", download_dir="},
	// SGLang: "server_args=ServerArgs(model_path='x', tokenizer_path=...".
	{"server_args=ServerArgs(", "SGLang server_args", []string{"ServerArgs(model_path="}, ", revision=", ", download_dir="},
}

// loggedModelLine reads the model a start-up line names into e.
func loggedModelLine(line string, e *EngineFacts) bool {
	for _, m := range modelLines {
		i := strings.Index(line, m.mark)
		if i < 0 {
			continue
		}
		args := line[i:]
		var model string
		for _, k := range m.models {
			if v, ok := pyStringAfter(args, k); ok && v != "" {
				model = v
				break
			}
		}
		if model == "" {
			return false
		}
		rev, _ := pyStringAfter(args, m.rev)
		dl, _ := pyStringAfter(args, m.downloads)
		e.LoggedModel, e.LoggedModelFrom, e.LoggedRevision, e.LoggedDownloadDir = model, m.from, rev, dl
		return true
	}
	return false
}

// maxLoggedValue bounds a logged path or name: longer is not one.
const maxLoggedValue = 4096

// pyStringAfter reads the Python string literal right after key in s,
// as written between its quotes (escapes kept); ok is false where key is
// absent, the value is not a string (None) or its closing quote is
// missing (a cut line).
func pyStringAfter(s, key string) (v string, ok bool) {
	i := strings.Index(s, key)
	if i < 0 {
		return "", false
	}
	s = s[i+len(key):]
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return "", false
	}
	q := s[0]
	for j := 1; j < len(s) && j <= maxLoggedValue+1; j++ {
		switch s[j] {
		case '\\':
			j++ // the escaped character does not close
		case q:
			return s[1:j], true
		}
	}
	return "", false
}
