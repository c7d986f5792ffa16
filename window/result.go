package window

import (
	"math"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Opt is a value a window may lack: a number that could not be measured
// stays missing (OK false), it never reads as 0.
type Opt[T int64 | float64 | string] struct {
	V  T
	OK bool
}

// Some returns a present value.
func Some[T int64 | float64 | string](v T) Opt[T] { return Opt[T]{V: v, OK: true} }

// Closed is what one window closed with: a result per known GPU, in index
// order, then one per server, in configuration order (design §4).
type Closed struct {
	Start   time.Time
	GPUs    []GPUWindow
	Servers []ServerWindow
}

// GPUWindow is one GPU's (or MIG instance's) summary of one window, a
// tpsmon_gpu point once analysed. Names and units are schema's (schema.GPUFields).
type GPUWindow struct {
	Start  time.Time
	Length time.Duration // window_s

	Host   string
	Label  string // the gpu tag: index, or index/instance for MIG
	UUID   string
	Name   string
	Server string // comma-joined servers using the GPU, empty when none

	Util, UtilMax, MemUtil      Opt[float64]
	MemUsedBytes, MemTotalBytes Opt[int64]
	PowerW                      Opt[float64]
	EnergyJ                     Opt[float64]
	EnergySource                Opt[string] // schema.EnergyCounter or schema.EnergyPower, with EnergyJ
	SMActive, SMOccupancy       Opt[float64]
	TensorActive, DRAMActive    Opt[float64]
	TempC, SMClockMHz           Opt[float64]
	Throttle                    Opt[int64] // bitmask, OR over the window
	Samples                     int64
	Coverage                    float64
	Error                       Opt[string] // the last read error in the window
}

// ServerWindow is one server's summary of one window, a tpsmon_server
// point once analysed (its state is the analysis stage's). Names and units are schema's (schema.ServerFields).
type ServerWindow struct {
	Start  time.Time
	Length time.Duration // window_s

	Host   string
	Server string
	Engine string
	Model  string
	// EngineVersion is the engine's own version where a source stated it
	// (Joiner.NameVersion), empty otherwise.
	EngineVersion string
	GPUs          []string // labels of the server's GPUs

	Tokens                         Opt[int64]
	SystemTPS, PerUserTPS          Opt[float64]
	PromptTokens                   Opt[int64]
	PromptTPS                      Opt[float64]
	Running, Waiting, KVCacheUsage Opt[float64]
	Preemptions                    Opt[int64]
	GPUUtil, GPUUtilMax, SMActive  Opt[float64]
	MemUsedBytes, MemTotalBytes    Opt[int64]
	PowerW, EnergyJ                Opt[float64]
	TokensPerJoule, TPSPerGPU      Opt[float64]
	// DecodeStepsPerS is the engine's own step counter's rate (llama.cpp
	// n_decode_total, TensorRT-LLM iterations, TGI decode batches), over
	// the part of the window it was observed; absent where the engine
	// counts no steps. llama.cpp's also counts prompt batches.
	DecodeStepsPerS Opt[float64]
	Coverage        float64
	Source          string // schema.SourceMetrics or schema.SourceLog

	// What the window's sources said beyond its fields, for the analysis
	// stage (package analysis); not written as such.
	//
	// ExactTokens is the tokens made, unrounded: Tokens rounds them through
	// a running total, so that windows add up. Down says no source spoke
	// for the window (no scrape answered, the log was not readable).
	// Preempted says requests were preempted in it, even where the count
	// rounds to none.
	ExactTokens Opt[float64]
	Down        bool
	Preempted   bool
	// Latency is what the sources said of the requests' latencies.
	Latency Latency
	// Counts holds what each counter said of a scraped window, Gauges each
	// gauge's mean over it: the analysis derives from those a window has
	// no field for (the prompt's split, speculation, why requests wait).
	// A window the log spoke for has none.
	Counts [sample.NumCounters]Count
	Gauges [sample.NumGauges]Opt[float64]
	// CountersDoubted says the collector's Guard refused the server's
	// counters in the window as no one process's (they fell and rose
	// again, or stepped): a rate typed as a counter, or two processes
	// behind one address.
	CountersDoubted bool
}

// Count is what one counter said of one window.
type Count struct {
	// Delta is its increase over the window (between the readings
	// bracketing its edges).
	Delta float64
	// Rate is the increase per second over the stretches the counter was
	// observed (RateOK false when none was).
	Rate   float64
	RateOK bool
	// Total is its reading at the window's end, cumulative since the
	// server started.
	Total float64
	OK    bool
	// Derived says tpsmon built the counter (it counts from when tpsmon
	// started watching, not from the server's start).
	Derived bool
}

// Int is the integer increase: the difference of the rounded readings,
// so that consecutive windows add up.
func (c Count) Int() int64 { return int64(math.Round(c.Total)) - int64(math.Round(c.Total-c.Delta)) }
