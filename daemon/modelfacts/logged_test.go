package modelfacts

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/config"
)

// tinyDir is a model directory as vLLM loads one: a config.json (Llama,
// 2 layers, 2 KV heads of 2) and a model.safetensors of BF16 tensors,
// 1704 parameters in 3408 bytes of which the untied input embedding
// (32 × 8) is 256 in 512.
var tinyDir = filepath.Join("testdata", "tiny-llama")

const (
	tinyParams = 1704 - 256
	tinyBytes  = 3408 - 512
	tinyCommit = "0123456789abcdef0123456789abcdef01234567"
)

func isTiny(r *roofline.Server) bool {
	m := r.Model
	return m.Params == tinyParams && m.WeightBytes == tinyBytes && m.Layers == 2 && m.KVHeads == 2 && m.HeadDim == 2
}

// hubRepo lays out repo id in hub as huggingface_hub does: the files of
// each snapshot are links to blobs, refs/<ref> holds the commit (no ref
// file when ref is "").
func hubRepo(t *testing.T, hub, id, ref string, commits ...string) string {
	t.Helper()
	repo := filepath.Join(hub, "models--"+strings.ReplaceAll(id, "/", "--"))
	abs, err := filepath.Abs(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commits {
		snap := filepath.Join(repo, "snapshots", c)
		must(t, os.MkdirAll(snap, 0o755))
		must(t, os.MkdirAll(filepath.Join(repo, "blobs"), 0o755))
		for _, f := range []string{"config.json", "model.safetensors"} {
			blob := filepath.Join(repo, "blobs", c+"-"+f)
			b, err := os.ReadFile(filepath.Join(abs, f))
			must(t, err)
			must(t, os.WriteFile(blob, b, 0o644))
			must(t, os.Symlink(filepath.Join("..", "..", "blobs", c+"-"+f), filepath.Join(snap, f)))
		}
	}
	if ref != "" {
		must(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
		must(t, os.WriteFile(filepath.Join(repo, "refs", ref), []byte(commits[0]), 0o644))
	}
	return repo
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// noEnv is an environment without the hub cache conventions.
func noEnv(t *testing.T, env map[string]string) {
	was := hfEnv
	hfEnv = func(k string) string { return env[k] }
	t.Cleanup(func() { hfEnv = was })
}

// The model a server logged is read as a configured model directory is:
// a local directory, a hub cache's repo directory, a repo id found in the
// configured hub caches, the logged download directory or tpsmon's
// HF_HUB_CACHE / HF_HOME; the configuration wins fact by fact, and the
// source names the line, the path and the snapshot.
func TestWithEngineReadsTheLoggedModel(t *testing.T) {
	hub, env, dl := t.TempDir(), t.TempDir(), t.TempDir()
	hubRepo(t, hub, "org/tiny", "main", tinyCommit)
	hubRepo(t, hub, "org/dev", "dev", tinyCommit)
	hubRepo(t, hub, "gpt2", "", tinyCommit) // no ref: its only snapshot
	hubRepo(t, filepath.Join(env, "hub"), "org/fromenv", "main", tinyCommit)
	hubRepo(t, dl, "org/downloaded", "main", tinyCommit)
	logRepo := hubRepo(t, t.TempDir(), "org/local", "main", tinyCommit)
	local, _ := filepath.Abs(tinyDir)
	noEnv(t, map[string]string{"HF_HOME": env})
	logged := func(v string) collector.EngineFacts {
		return collector.EngineFacts{LoggedModel: v, LoggedModelFrom: "vLLM engine config"}
	}
	withHub := config.ServerConfig{Roofline: config.RooflineConfig{HFHubDirs: []string{hub}}}
	cases := []struct {
		name string
		s    config.ServerConfig
		e    collector.EngineFacts
		want func(*roofline.Server) bool
		src  []string
	}{
		{"a local directory", config.ServerConfig{}, logged(local + "/"), isTiny,
			[]string{`model from the engine's log (vLLM engine config model "` + local + `/")`}},
		{"a hub cache's repo directory", config.ServerConfig{}, logged(logRepo), isTiny,
			[]string{"snapshots/" + tinyCommit + " (refs/main " + tinyCommit + ")"}},
		{"a repo id in the configured cache", withHub, logged("org/tiny"), isTiny,
			[]string{`"org/tiny" at ` + filepath.Join(hub, "models--org--tiny", "snapshots", tinyCommit)}},
		{"its logged revision", withHub, collector.EngineFacts{LoggedModel: "org/dev", LoggedModelFrom: "vLLM non-default args", LoggedRevision: "dev"}, isTiny,
			[]string{"(refs/dev " + tinyCommit + ")"}},
		{"a commit as revision", withHub, collector.EngineFacts{LoggedModel: "org/dev", LoggedRevision: tinyCommit}, isTiny,
			[]string{"(revision " + tinyCommit + ")"}},
		{"the only snapshot without refs/main", withHub, logged("gpt2"), isTiny,
			[]string{"its only snapshot " + tinyCommit + ", no refs/main"}},
		{"HF_HOME's hub", config.ServerConfig{}, logged("org/fromenv"), isTiny,
			[]string{filepath.Join(env, "hub", "models--org--fromenv")}},
		{"the logged download_dir", config.ServerConfig{}, collector.EngineFacts{LoggedModel: "org/downloaded", LoggedModelFrom: "SGLang server_args", LoggedDownloadDir: dl}, isTiny,
			[]string{filepath.Join(dl, "models--org--downloaded")}},
		{"configured layers over the file's", config.ServerConfig{Roofline: config.RooflineConfig{Layers: 9, KVTokens: 100}}, logged(local),
			func(r *roofline.Server) bool {
				return r.Model.Layers == 9 && r.Model.Params == tinyParams && r.KVTokens == 100
			}, nil},
		{"a configured model over the logged", config.ServerConfig{ModelFile: tinyGGUF}, logged(local),
			func(r *roofline.Server) bool { return !isTiny(r) && r.Model.WeightBytes > 0 }, []string{"model from the configuration"}},
		{"the engine's KV over the file's", config.ServerConfig{}, collector.EngineFacts{LoggedModel: local, KVTokens: 5000, KVTokensFrom: "log", KVDtype: "fp8"},
			func(r *roofline.Server) bool { return isTiny(r) && r.KVTokens == 5000 && r.Model.KVBytes == 1 }, []string{"KV capacity 5000 tokens"}},
	}
	for _, c := range cases {
		r, src, err := WithEngine(c.s, c.e)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !c.want(r) {
			t.Errorf("%s: %+v", c.name, r.Model)
		}
		for _, w := range c.src {
			if !strings.Contains(src, w) {
				t.Errorf("%s: source %q lacks %q", c.name, src, w)
			}
		}
	}
}

// What the logged model cannot give is said, and no fact is taken from
// it: a ".." element, a relative path, an escape, a path not here, a link
// loop, a repo in no cache or with snapshots but no ref, a ref that is
// not a commit; a truncated, huge or FIFO config.json. Facts the engine
// gave besides the model (params, from /v1/models) still serve, with the
// reason said.
func TestLoggedModelRefused(t *testing.T) {
	noEnv(t, nil)
	dir, hub := t.TempDir(), t.TempDir()
	hubRepo(t, hub, "org/two", "", tinyCommit, strings.Repeat("f", 40))
	bad := hubRepo(t, hub, "org/badref", "main", tinyCommit)
	must(t, os.WriteFile(filepath.Join(bad, "refs", "main"), []byte("../../../../etc/passwd"), 0o644))
	must(t, os.Symlink(filepath.Join(dir, "loop"), filepath.Join(dir, "loop")))
	modelDir := func(name string, config func(path string) error) string {
		d := filepath.Join(dir, name)
		must(t, os.Mkdir(d, 0o755))
		b, err := os.ReadFile(filepath.Join(tinyDir, "model.safetensors"))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(d, "model.safetensors"), b, 0o644))
		must(t, config(filepath.Join(d, "config.json")))
		return d
	}
	truncated := modelDir("truncated", func(p string) error { return os.WriteFile(p, []byte(`{"num_hidden_layers": 2, "num_key_val`), 0o644) })
	huge := modelDir("huge", func(p string) error {
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Truncate(9 << 20) // sparse: no disk
	})
	fifo := modelDir("fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) })
	loopCfg := modelDir("loopcfg", func(p string) error { return os.Symlink(p, p) })
	s := config.ServerConfig{Roofline: config.RooflineConfig{HFHubDirs: []string{hub}}}
	cases := []struct {
		name, model string
		why         []string
	}{
		{"dot-dot", "/models/../etc", []string{`".." element`}},
		{"dot-dot relative", "../models/x", []string{`".." element`}},
		{"dot relative", "./models/x", []string{"working directory"}},
		{"home", "~/models/x", []string{"working directory"}},
		{"escaped", `/models/it\'s`, []string{"escaped"}},
		{"not here", "/nonexistent/model", []string{"/nonexistent/model is not here"}},
		{"link loop", filepath.Join(dir, "loop"), []string{"too many levels of symbolic links"}},
		{"repo in no cache", "org/absent", []string{"no hub cache searched (" + hub + ")", "hf_hub_dirs"}},
		{"snapshots without a ref", "org/two", []string{"in the hub cache, but", "2 snapshots", "not known"}},
		{"a ref not a commit", "org/badref", []string{"not a commit hash"}},
		{"truncated config.json", truncated, []string{truncated, "config.json", "unexpected end of JSON"}},
		{"huge config.json", huge, []string{"9437184 bytes, more than any config.json"}},
		{"FIFO config.json", fifo, []string{"named pipe"}},
		{"config.json a link loop", loopCfg, []string{"too many levels of symbolic links"}},
	}
	for _, c := range cases {
		e := collector.EngineFacts{LoggedModel: c.model, LoggedModelFrom: "vLLM engine config", KVTokens: 1000, KVTokensFrom: "log"}
		r, _, err := WithEngine(s, e)
		if err == nil || !errors.Is(err, ErrNoModel) {
			t.Errorf("%s: facts %+v, error %v; want no model facts", c.name, r, err)
			continue
		}
		for _, w := range c.why {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
		// A parameter count the engine said besides serves, the reason said.
		e.Params = 8e9
		if _, src, err := WithEngine(s, e); err != nil && !strings.Contains(c.name, "config.json") {
			t.Errorf("%s with /v1/models meta: %v", c.name, err)
		} else if err == nil && !strings.Contains(src, c.why[0]) {
			t.Errorf("%s with /v1/models meta: source %q does not say %q", c.name, src, c.why[0])
		}
	}
}

// A path tpsmon's user may not look at is said so in words.
func TestStatErrSaysPermission(t *testing.T) {
	err := statErr(&fs.PathError{Op: "stat", Path: "/root/.cache/huggingface/hub/models--a--b", Err: fs.ErrPermission})
	if !strings.Contains(err.Error(), "/root/.cache/huggingface/hub/models--a--b: tpsmon's user may not read it") {
		t.Error(err)
	}
}

// The hub caches, in order, each once: configured, logged, then the
// first of tpsmon's conventions that is set.
func TestHubDirs(t *testing.T) {
	cases := []struct {
		env  map[string]string
		dl   string
		want []string
	}{
		{map[string]string{"HF_HUB_CACHE": "/hf/hub", "HF_HOME": "/hf"}, "/data/hf", []string{"/cfg", "/data/hf", "/hf/hub"}},
		{map[string]string{"HF_HOME": "/hf"}, "", []string{"/cfg", "/hf/hub"}},
		{map[string]string{"XDG_CACHE_HOME": "/xdg", "HOME": "/home/u"}, "relative/dir", []string{"/cfg", "/xdg/huggingface/hub"}},
		{map[string]string{"HOME": "/home/u"}, "/data/../etc", []string{"/cfg", "/home/u/.cache/huggingface/hub"}},
		{map[string]string{"HF_HUB_CACHE": "/cfg/"}, "/cfg", []string{"/cfg"}},
	}
	for _, c := range cases {
		noEnv(t, c.env)
		got := HubDirs([]string{"/cfg"}, collector.EngineFacts{LoggedDownloadDir: c.dl})
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%v, download_dir %q: %v, want %v", c.env, c.dl, got, c.want)
		}
	}
}
