// Package config loads tpsmon's configuration (design §6): the YAML file,
// then TPSMON_* environment variables, then flags; and refuses a bad value
// with the name of its key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/analysis/roofline"
	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/internal/redact"
	"github.com/tpsmon/tpsmon/internal/statefile"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/otlp"
)

// DefaultPath is where the package installs the configuration.
const DefaultPath = "/etc/tpsmon/tpsmon.yaml"

const defaultSpoolDir = "/var/lib/tpsmon/spool"

// NoFileSink as sink.file.path writes points nowhere: the packaged
// default, so a service not yet pointed at InfluxDB does not fill the
// journal.
const NoFileSink = "none"

// Config is design §6. Every key has its default in Default.
type Config struct {
	Host      string          `mapstructure:"host"`
	Window    time.Duration   `mapstructure:"window"`
	Grace     time.Duration   `mapstructure:"grace"`
	GPU       GPUConfig       `mapstructure:"gpu"`
	Servers   []ServerConfig  `mapstructure:"servers"`
	Discovery DiscoveryConfig `mapstructure:"discovery"`
	Sink      SinkConfig      `mapstructure:"sink"`
	HTTP      HTTPConfig      `mapstructure:"http"`
	Log       LogConfig       `mapstructure:"log"`
	// Thresholds of the state verdict (design §5).
	Thresholds analysis.Thresholds `mapstructure:"thresholds"`
	// SLO is the latency objective of servers without their own.
	SLO analysis.SLO `mapstructure:"slo"`

	// What the file held (reload.go): its path, "" when no file was read,
	// and the keys it set.
	file     string
	fileKeys []string
}

// GPUConfig selects the GPU backend.
type GPUConfig struct {
	Backend  string        `mapstructure:"backend"`
	Interval time.Duration `mapstructure:"interval"`
	Devices  []string      `mapstructure:"devices"`
	// SimGPUs is how many GPUs the sim backend pretends to have.
	SimGPUs int `mapstructure:"sim_gpus"`
}

// ServerConfig is one inference server.
type ServerConfig struct {
	Name           string          `mapstructure:"name"`
	Engine         string          `mapstructure:"engine"`
	MetricsURL     string          `mapstructure:"metrics_url"`
	Log            LogSourceConfig `mapstructure:"log"`
	GPUs           []string        `mapstructure:"gpus"`
	ScrapeInterval time.Duration   `mapstructure:"scrape_interval"`
	// SLO is the server's latency objective; nil: the top-level slo.
	SLO *analysis.SLO `mapstructure:"slo"`
	// ModelFile is the model the server serves (GGUF, safetensors, a
	// safetensors index, config.json or a model directory): its headers
	// give the decode ceiling's bytes and architecture.
	ModelFile string         `mapstructure:"model_file"`
	Roofline  RooflineConfig `mapstructure:"roofline"`
}

// RooflineConfig is what a server's decode ceiling needs beyond its model
// file; each is optional (0: from the model file, NVML and the table).
// The model's own facts, where no file is at hand (a remote server), are
// given as `tpsmon roofline` takes them, over the file's.
type RooflineConfig struct {
	ParamsB        float64 `mapstructure:"params_b"`
	BytesPerWeight float64 `mapstructure:"bytes_per_weight"`
	ActiveParamsB  float64 `mapstructure:"active_params_b"`
	EmbedParamsB   float64 `mapstructure:"embed_params_b"`
	Experts        int     `mapstructure:"experts"`
	ExpertsUsed    int     `mapstructure:"experts_used"`
	Layers         int     `mapstructure:"layers"`
	KVHeads        int     `mapstructure:"kv_heads"`
	HeadDim        int     `mapstructure:"head_dim"`

	// GPU names the GPU in the built-in table, for a server whose GPUs
	// NVML does not show (a container, another node).
	GPU string `mapstructure:"gpu"`
	// PeakBWGBps and PeakTFLOPS are the peaks of one GPU (or, for a CPU
	// server, of the machine's memory) over the table's.
	PeakBWGBps float64 `mapstructure:"peak_bw_gbps"`
	PeakTFLOPS float64 `mapstructure:"peak_tflops"`
	// TP is the tensor-parallel degree (0: the server's GPUs).
	TP int `mapstructure:"tp"`
	// KVBytes is the KV cache's element size (0: 2, BF16/FP16).
	KVBytes float64 `mapstructure:"kv_bytes"`
	// KVTokens is the KV cache's capacity in tokens (llama.cpp's -c,
	// vLLM's "GPU KV cache size"); 0: the KV is not counted.
	KVTokens float64 `mapstructure:"kv_tokens"`
	// Speculative is the mean tokens a sequence gains per decode step
	// (0: 1, no speculative decoding).
	Speculative float64 `mapstructure:"speculative"`
	// HFHubDirs are Hugging Face hub caches (absolute directories of
	// models--owner--name/) searched first for a repo id the server logged
	// as its model (vLLM, SGLang); then its logged download_dir and
	// tpsmon's HF_HUB_CACHE / HF_HOME conventions.
	HFHubDirs []string `mapstructure:"hf_hub_dirs"`
}

// LogSourceConfig names a server's log.
type LogSourceConfig struct {
	File        string `mapstructure:"file"`
	JournalUnit string `mapstructure:"journal_unit"`
}

// DiscoveryConfig finds local servers when none are configured.
type DiscoveryConfig struct {
	Enabled bool  `mapstructure:"enabled"`
	Ports   []int `mapstructure:"ports"`
}

// SinkConfig says where points go.
type SinkConfig struct {
	Influx sink.InfluxConfig `mapstructure:"influx"`
	// OTLP pushes the windows to an OpenTelemetry metrics receiver too,
	// from a spool of its own (sink/otlp).
	OTLP  otlp.Config `mapstructure:"otlp"`
	File  FileConfig  `mapstructure:"file"`
	Spool SpoolConfig `mapstructure:"spool"`
}

// FileConfig is the line protocol file sink.
type FileConfig struct {
	Path string `mapstructure:"path"`
}

// SpoolConfig bounds the delivery queue.
type SpoolConfig struct {
	Dir      string   `mapstructure:"dir"`
	MaxBytes ByteSize `mapstructure:"max_bytes"`
	// QuarantineMaxBytes bounds quarantine/, where refused and corrupt
	// points are kept for a look.
	QuarantineMaxBytes ByteSize `mapstructure:"quarantine_max_bytes"`
}

// HTTPConfig is the self-telemetry endpoint.
type HTTPConfig struct {
	Listen string `mapstructure:"listen"`
	// Pprof serves Go's profiles under /debug/pprof/ on the same listener:
	// off by default, since anyone who reaches the port may read them.
	Pprof bool `mapstructure:"pprof"`
	// MaxConnections caps the endpoint's open connections, so that
	// clients cannot take the file descriptors scrapes need; the daemon
	// lowers it to a quarter of its open-file limit.
	MaxConnections int `mapstructure:"max_connections"`
	// WindowMetrics serves the last closed window of every server and GPU
	// on /metrics as tpsmon_window_* gauges (daemon/agent/windowmetrics.go).
	WindowMetrics bool `mapstructure:"window_metrics"`
}

// LogConfig sets tpsmon's own logging.
type LogConfig struct {
	Level string `mapstructure:"level"`
}

// ByteSize is a size written as "512MiB", "1GiB", "10MB" or bytes.
type ByteSize int64

// Default is the configuration before any file, variable or flag: every
// key's default, in the one place they are written. Load hands each of
// its values to viper under the key the mapstructure tags spell (keys), so
// that TPSMON_* environment variables reach every key.
func Default() Config {
	return Config{
		Window: 10 * time.Second,
		Grace:  5 * time.Second,
		GPU:    GPUConfig{Backend: "nvml", Interval: time.Second, Devices: []string{}, SimGPUs: 2},
		// A list, so that a file's servers replace it whole.
		Servers:   []ServerConfig{},
		Discovery: DiscoveryConfig{Enabled: true, Ports: []int{8000, 30000, 3000, 8080, 8002, 23333}},
		Sink: SinkConfig{
			Influx: sink.InfluxConfig{Bucket: "tpsmon", Timeout: 10 * time.Second, GZip: true, Profile: string(sink.ProfileInflux)},
			OTLP:   otlp.Config{Headers: []string{}, Timeout: 10 * time.Second, GZip: true},
			File:   FileConfig{Path: "-"},
			Spool:  SpoolConfig{Dir: defaultSpoolDir, MaxBytes: 1 << 30, QuarantineMaxBytes: 64 << 20},
		},
		HTTP:       HTTPConfig{Listen: "127.0.0.1:9464", MaxConnections: 64, WindowMetrics: true},
		Log:        LogConfig{Level: "info"},
		Thresholds: analysis.DefaultThresholds,
	}
}

// keys lists every configuration key with its default: the leaves of
// Default, named by the path of mapstructure tags down to them (a struct
// is a level, anything else a key; a list is one key). Durations are given
// as text, as a file writes them: a bare number is refused
// (rejectBareDuration).
func keys() map[string]any {
	out := map[string]any{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if opts == "squash" && f.Type.Kind() == reflect.Struct {
				walk(v.Field(i), prefix) // an embedded struct's keys are its parent's
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name) // as mapstructure matches it; TestKeysHaveDefaults wants a tag
			}
			switch fv := v.Field(i); {
			case f.Type.Kind() == reflect.Struct:
				walk(fv, prefix+name+".")
			case f.Type == durationType:
				out[prefix+name] = fv.Interface().(time.Duration).String()
			default:
				out[prefix+name] = fv.Interface()
			}
		}
	}
	walk(reflect.ValueOf(Default()), "")
	return out
}

// flagKeys maps command-line flags to configuration keys: a flag of these
// names, when the command has it, overrides its key.
var flagKeys = map[string]string{
	"host":        "host",
	"window":      "window",
	"grace":       "grace",
	"gpu-backend": "gpu.backend",
	"influx-url":  "sink.influx.url",
	"org":         "sink.influx.org",
	"bucket":      "sink.influx.bucket",
	"token-file":  "sink.influx.token_file",
	"log-level":   "log.level",
}

// Load reads the file at path (the default path may be missing unless
// explicit), then TPSMON_* environment variables, then the flags that were
// set.
func Load(path string, explicit bool, flags *pflag.FlagSet) (*Config, error) {
	v, err := newViper(flags)
	if err != nil {
		return nil, err
	}
	var file string
	var fileKeys []string
	if path != "" {
		// Read once: the keys a reload compares are those of the bytes
		// parsed, even while an editor rewrites the file.
		b, err := os.ReadFile(path)
		switch {
		case err != nil && !explicit && errors.Is(err, fs.ErrNotExist):
			// No file at the default path: defaults, env and flags.
		case err != nil:
			return nil, fmt.Errorf("config %s: %w", path, err)
		case noKeys(b):
			// Defaults for everything is never what a written file means
			// (a truncated save, a reload racing an editor).
			return nil, fmt.Errorf("config %s: the file is empty; refusing to run on defaults", path)
		default:
			v.SetConfigType("yaml")
			if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
				return nil, fmt.Errorf("config %s: %w", path, err)
			}
			file, fileKeys = path, keysOf(b)
		}
	}
	c := Config{file: file, fileKeys: fileKeys}
	hook := viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		rejectBareDuration,
		mapstructure.StringToTimeDurationHookFunc(),
		// Weak: a list of numbers from an environment variable is text too.
		mapstructure.StringToWeakSliceHookFunc(","),
		byteSizeHook,
	))
	if err := v.UnmarshalExact(&c, hook); err != nil {
		return nil, fmt.Errorf("config: %w", oneLine(err))
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, nil
}

// newViper is a viper with every key's default, reading TPSMON_*
// variables and flags.
func newViper(flags *pflag.FlagSet) (*viper.Viper, error) {
	v := viper.NewWithOptions(
		viper.EnvKeyReplacer(strings.NewReplacer(".", "_")),
		viper.ExperimentalBindStruct(),
	)
	v.SetEnvPrefix("TPSMON")
	v.AutomaticEnv()
	for k, d := range keys() {
		v.SetDefault(k, d)
	}
	if flags != nil {
		for name, key := range flagKeys {
			if f := flags.Lookup(name); f != nil {
				if err := v.BindPFlag(key, f); err != nil {
					return nil, fmt.Errorf("config: flag --%s: %w", name, err)
				}
			}
		}
	}
	return v, nil
}

// oneLine folds mapstructure's multi-line error lists, and says "top
// level" where mapstructure names the root ”.
func oneLine(err error) error {
	s := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
	// mapstructure 2.4 names the root '', 2.5 by its type.
	s = strings.ReplaceAll(s, "'' has invalid keys:", "unknown top-level key:")
	s = strings.ReplaceAll(s, "'config.Config' has invalid keys:", "unknown top-level key:")
	return errors.New(s)
}

// noKeys tells whether a YAML file holds nothing but blank lines,
// comments and document markers.
func noKeys(b []byte) bool {
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") && l != "---" && l != "..." {
			return false
		}
	}
	return true
}

// UnknownEnv lists the TPSMON_* variables that name no configuration key
// (a typo would otherwise be ignored without a word).
func UnknownEnv() []string {
	known := map[string]bool{}
	for k := range keys() {
		known["TPSMON_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = true
	}
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "TPSMON_") && !known[name] && !testEnv[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// testEnv are variables of tpsmon's own tests, not configuration.
var testEnv = map[string]bool{"TPSMON_TEST_INFLUX_URL": true, "TPSMON_REQUIRE_TMUX": true}

var durationType = reflect.TypeOf(time.Duration(0))

// rejectBareDuration refuses `window: 10`, which would silently mean 10 ns.
func rejectBareDuration(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("duration %v has no unit: write it like \"%vs\"", data, data)
	}
	return data, nil
}

var byteSizeType = reflect.TypeOf(ByteSize(0))

func byteSizeHook(from, to reflect.Type, data any) (any, error) {
	if to != byteSizeType || from.Kind() != reflect.String {
		return data, nil
	}
	return parseByteSize(data.(string))
}

func parseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	orig := s
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || !(n >= 0) {
		return 0, fmt.Errorf("size %q: want a number with an optional unit such as 512MiB or 1GiB", orig)
	}
	if n*float64(mult) > maxSize {
		return 0, fmt.Errorf("size %q is too large (at most 1PiB)", orig)
	}
	return ByteSize(n * float64(mult)), nil
}

// Bounds of the configuration.
const (
	// minInterval is the shortest sampling or scrape interval: NVML
	// refreshes most readings every 20-100 ms and a metrics page takes
	// milliseconds to render, so anything faster reads the same values
	// again and only costs CPU and memory.
	minInterval = 10 * time.Millisecond
	// MinWindow is the shortest window: shorter, a window holds less than
	// the scrapes and samples it joins.
	MinWindow = 100 * time.Millisecond
	// MaxWindow keeps a window a measurement, not a report (rollups make
	// the hours and days).
	MaxWindow = time.Hour
	// maxGraceWindows bounds grace in windows (or a minute, whichever is
	// longer): every window within grace stays open in memory.
	maxGraceWindows = 10
	// maxHost is the longest host tag: a DNS name has at most 253 bytes.
	maxHost = 253
	// maxSize bounds sizes (1 PiB): beyond it a size is a typo, and the
	// byte count would overflow.
	maxSize = 1 << 50
	// maxHTTPConns bounds http.max_connections: the endpoint serves a few
	// scrapers and probes, and the open-file limit lowers it further.
	maxHTTPConns = 65536
)

// CheckWindow says what is wrong with a window length, if anything: the
// daemon's configuration and replay's --window take the same.
func CheckWindow(w time.Duration) error {
	if w < MinWindow {
		return fmt.Errorf("%v is too short (at least %v)", w, MinWindow)
	}
	if w > MaxWindow {
		return fmt.Errorf("%v is too long (at most %v)", w, MaxWindow)
	}
	return nil
}

// validate checks every key and fills the defaults that depend on others.
func (c *Config) validate() error {
	for _, check := range []func() error{c.validateNode, c.validateGPU, c.validateServers, c.validateSink,
		c.validateThresholds, c.validateSLO, c.validateLog} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) validateNode() error {
	if c.Host == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("host: empty and the hostname is unknown: %w", err)
		}
		c.Host = h
	}
	if len(c.Host) > maxHost || strings.IndexFunc(c.Host, unicode.IsControl) >= 0 {
		return fmt.Errorf("host: %d bytes; want at most %d, without control characters", len(c.Host), maxHost)
	}
	if err := CheckWindow(c.Window); err != nil {
		return fmt.Errorf("window: %w", err)
	}
	if c.Grace < 0 {
		return fmt.Errorf("grace: %v is negative", c.Grace)
	}
	if limit := max(maxGraceWindows*c.Window, time.Minute); c.Grace > limit {
		return fmt.Errorf("grace: %v is longer than %d windows or a minute (at most %v for window %v)", c.Grace, maxGraceWindows, limit, c.Window)
	}
	for i, port := range c.Discovery.Ports {
		if port < 1 || port > 65535 {
			return fmt.Errorf("discovery.ports[%d]: %d is not a port (1-65535)", i, port)
		}
	}
	if c.HTTP.Listen != "" {
		_, port, err := net.SplitHostPort(c.HTTP.Listen)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 {
			return fmt.Errorf("http.listen: %q is not host:port with a port in 0-65535 (0: any free port)", c.HTTP.Listen)
		}
	}
	if n := c.HTTP.MaxConnections; n < 1 || n > maxHTTPConns {
		return fmt.Errorf("http.max_connections: %d is not between 1 and %d", n, maxHTTPConns)
	}
	return nil
}

func (c *Config) validateGPU() error {
	switch c.GPU.Backend {
	case "nvml", "sim", "none":
	default:
		return fmt.Errorf("gpu.backend: %q is not one of nvml, sim, none", c.GPU.Backend)
	}
	if c.GPU.SimGPUs < 1 || c.GPU.SimGPUs > 1024 {
		return fmt.Errorf("gpu.sim_gpus: %d is not between 1 and 1024", c.GPU.SimGPUs)
	}
	if err := checkInterval("gpu.interval", c.GPU.Interval); err != nil {
		return err
	}
	return nil
}

func (c *Config) validateServers() error {
	names := map[string]bool{}
	for i := range c.Servers {
		s := &c.Servers[i]
		at := fmt.Sprintf("servers[%d]", i)
		if s.Name == "" {
			return fmt.Errorf("%s.name: missing", at)
		}
		if names[s.Name] {
			return fmt.Errorf("%s.name: %q is used twice", at, s.Name)
		}
		names[s.Name] = true
		if err := s.validate(at); err != nil {
			return err
		}
	}
	return nil
}

// validate checks one server; at names it in errors.
func (s *ServerConfig) validate(at string) error {
	if s.Engine == "" {
		s.Engine = engine.Auto
	}
	// auto may turn out to be any engine: nothing to check before.
	e := engine.Engine{Metrics: true, Log: engine.Auto}
	if s.Engine != engine.Auto {
		var err error
		if e, err = engine.Lookup(s.Engine); err != nil {
			return fmt.Errorf("%s.engine: %w", at, err)
		}
		s.Engine = e.Name // aliases are spelled one way from here on
	}
	hasLog := s.Log.File != "" || s.Log.JournalUnit != ""
	if s.Log.File != "" && s.Log.JournalUnit != "" {
		return fmt.Errorf("%s.log: give file or journal_unit, not both", at)
	}
	if hasLog {
		if err := e.CheckLog(); err != nil {
			return fmt.Errorf("%s.log: %w", at, err)
		}
	}
	if s.MetricsURL == "" && !hasLog {
		return fmt.Errorf("%s: give metrics_url, log.file or log.journal_unit", at)
	}
	if s.MetricsURL != "" {
		if err := checkURL(at+".metrics_url", s.MetricsURL); err != nil {
			return err
		}
		if err := e.CheckMetrics(); err != nil {
			return fmt.Errorf("%s.metrics_url: %w", at, err)
		}
	}
	if s.ScrapeInterval == 0 {
		s.ScrapeInterval = time.Second
	}
	if err := checkInterval(at+".scrape_interval", s.ScrapeInterval); err != nil {
		return err
	}
	if len(s.GPUs) == 0 {
		s.GPUs = []string{"auto"}
	}
	return s.Roofline.Validate(at + ".roofline")
}

// Validate refuses a number out of range or a GPU the table does not
// know; at names the key in the message.
func (r *RooflineConfig) Validate(at string) error {
	for _, f := range []struct {
		key   string
		v, hi float64
	}{{"peak_bw_gbps", r.PeakBWGBps, 1e6}, {"peak_tflops", r.PeakTFLOPS, 1e6}, {"kv_bytes", r.KVBytes, 8},
		{"kv_tokens", r.KVTokens, 1e9}, {"speculative", r.Speculative, 64}, {"tp", float64(r.TP), 1024},
		{"params_b", r.ParamsB, 1e5}, {"bytes_per_weight", r.BytesPerWeight, 8}, {"active_params_b", r.ActiveParamsB, 1e5},
		{"embed_params_b", r.EmbedParamsB, 1e5}, {"experts", float64(r.Experts), 1e5}, {"experts_used", float64(r.ExpertsUsed), 1e5},
		{"layers", float64(r.Layers), 1e4}, {"kv_heads", float64(r.KVHeads), 1e5}, {"head_dim", float64(r.HeadDim), 1e5}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > f.hi {
			return fmt.Errorf("%s.%s: %v is not in 0..%g", at, f.key, f.v, f.hi)
		}
	}
	if r.GPU != "" {
		if _, err := roofline.Lookup(r.GPU); err != nil {
			return fmt.Errorf("%s.gpu: %w", at, err)
		}
	}
	if r.Speculative != 0 && r.Speculative < 1 {
		return fmt.Errorf("%s.speculative: %v tokens a step is less than 1", at, r.Speculative)
	}
	for _, d := range r.HFHubDirs {
		if !filepath.IsAbs(d) || slices.Contains(strings.Split(d, "/"), "..") {
			return fmt.Errorf("%s.hf_hub_dirs: %q is not an absolute path without a .. element", at, d)
		}
	}
	return nil
}

// checkURL wants an http(s) URL with a host and, if given, a port in
// 1-65535; credentials are masked in the message.
func checkURL(key, u string) error {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Hostname() == "" {
		return fmt.Errorf("%s: %q is not an http(s) URL", key, redact.URL(u))
	}
	if p := pu.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%s: port %s is not in 1-65535", key, p)
		}
	}
	return nil
}

// checkInterval refuses a sampling interval below minInterval.
func checkInterval(key string, d time.Duration) error {
	if d < minInterval {
		return fmt.Errorf("%s: %v is too short (at least %v)", key, d, minInterval)
	}
	return nil
}

func (c *Config) validateSink() error {
	if u := c.Sink.Influx.URL; u != "" {
		if err := checkURL("sink.influx.url", u); err != nil {
			return err
		}
		if c.Sink.Influx.Bucket == "" {
			return errors.New("sink.influx.bucket: missing")
		}
	}
	if _, err := sink.ParseProfile(c.Sink.Influx.Profile); err != nil {
		return fmt.Errorf("sink.influx.profile: %w", err)
	}
	if c.Sink.Influx.Timeout <= 0 {
		return fmt.Errorf("sink.influx.timeout: %v must be positive", c.Sink.Influx.Timeout)
	}
	if err := c.validateOTLP(); err != nil {
		return err
	}
	// Under systemd, StateDirectory= is where state belongs.
	if sd := os.Getenv("STATE_DIRECTORY"); sd != "" && c.Sink.Spool.Dir == defaultSpoolDir {
		first, _, _ := strings.Cut(sd, ":")
		c.Sink.Spool.Dir = filepath.Join(first, "spool")
	}
	if c.Sink.Spool.MaxBytes < 1<<20 {
		return fmt.Errorf("sink.spool.max_bytes: %d bytes is too small (at least 1MiB)", c.Sink.Spool.MaxBytes)
	}
	// Room for a refused batch (about 1 MiB) twice over, in each half.
	if c.Sink.Spool.QuarantineMaxBytes < 4<<20 {
		return fmt.Errorf("sink.spool.quarantine_max_bytes: %d bytes is too small (at least 4MiB)", c.Sink.Spool.QuarantineMaxBytes)
	}
	return nil
}

func (c *Config) validateOTLP() error {
	o := &c.Sink.OTLP
	if o.Endpoint != "" {
		if _, err := otlp.EndpointURL(o.Endpoint); err != nil {
			return fmt.Errorf("sink.otlp.endpoint: %w", err)
		}
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("sink.otlp.timeout: %v must be positive", o.Timeout)
	}
	if _, err := o.HeaderMap(); err != nil {
		return fmt.Errorf("sink.otlp.headers: %w", err)
	}
	return nil
}

func (c *Config) validateThresholds() error {
	if err := c.Thresholds.Validate(); err != nil {
		return fmt.Errorf("thresholds.%w", err)
	}
	return nil
}

func (c *Config) validateSLO() error {
	if err := c.SLO.Validate(); err != nil {
		return fmt.Errorf("slo.%w", err)
	}
	for i, s := range c.Servers {
		if s.SLO == nil {
			continue
		}
		if err := s.SLO.Validate(); err != nil {
			return fmt.Errorf("servers[%d].slo.%w", i, err)
		}
	}
	return nil
}

// SLOs returns the analysis stage's objectives: the default and each
// server's own.
func (c *Config) SLOs() (analysis.SLO, map[string]analysis.ServerFacts) {
	per := map[string]analysis.ServerFacts{}
	for _, s := range c.Servers {
		if s.SLO != nil {
			slo := *s.SLO
			per[s.Name] = analysis.ServerFacts{SLO: &slo}
		}
	}
	return c.SLO, per
}

func (c *Config) validateLog() error {
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
}

// InfluxToken reads the token from sink.influx.token_file, or from the
// systemd credential influx-token when no file is configured.
func (c *Config) InfluxToken() (string, error) {
	path := c.Sink.Influx.TokenFile
	if path == "" {
		dir := os.Getenv("CREDENTIALS_DIRECTORY")
		if dir == "" {
			return "", nil
		}
		path = filepath.Join(dir, "influx-token")
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
	}
	b, err := readToken(path)
	if err != nil {
		return "", fmt.Errorf("sink.influx.token_file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// maxTokenBytes bounds a token file: tokens and user:password pairs are
// short, and a larger file is not one.
const maxTokenBytes = 64 << 10

// readToken reads a regular file of at most maxTokenBytes; anything else
// (FIFO, device, socket, directory) is refused without being read or
// waited for (statefile.OpenRegular). A link to a regular file is followed
// (Kubernetes' secrets are links).
func readToken(path string) ([]byte, error) {
	f, _, err := statefile.OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("%w: give a file that holds the token", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxTokenBytes {
		return nil, fmt.Errorf("%s is longer than %d bytes: not a token", path, maxTokenBytes)
	}
	return b, nil
}

// InfluxClient connects to the configured InfluxDB; userAgent names this
// tpsmon in its requests.
func (c *Config) InfluxClient(userAgent string) (*sink.Influx, error) {
	token, err := c.InfluxToken()
	if err != nil {
		return nil, err
	}
	ic := c.Sink.Influx
	ic.Token, ic.UserAgent = token, userAgent
	return sink.NewInflux(ic)
}

// OTLPClient returns the writer for sink.otlp; userAgent names this
// tpsmon in its requests.
func (c *Config) OTLPClient(userAgent string) (*otlp.Writer, error) {
	oc := c.Sink.OTLP
	oc.UserAgent = userAgent
	return otlp.New(oc)
}
