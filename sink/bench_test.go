package sink

import (
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

// benchWindow is a busy server's window, every value present.
var benchWindow = analysis.ServerWindow{State: schema.StateOK, ServerWindow: window.ServerWindow{Start: time.Unix(1_700_000_000, 0), Length: 10 * time.Second, Host: "node-a",
	Server: "llama-70b", Engine: "vllm", Model: "meta-llama/Llama-3.1-70B-Instruct", GPUs: []string{"0", "1", "2", "3"},
	Tokens: window.Some[int64](12345), SystemTPS: window.Some(1234.5), PerUserTPS: window.Some(45.6),
	PromptTokens: window.Some[int64](40000), PromptTPS: window.Some(4000.0), Running: window.Some(27.3),
	Waiting: window.Some(1.2), KVCacheUsage: window.Some(0.83), GPUUtil: window.Some(78.0), GPUUtilMax: window.Some(99.0),
	MemUsedBytes: window.Some[int64](300 << 30), PowerW: window.Some(2400.0), EnergyJ: window.Some(24000.0),
	TokensPerJoule: window.Some(0.51), TPSPerGPU: window.Some(308.6), Coverage: 1,
	Source: schema.SourceMetrics}}

// BenchmarkEncode encodes one server point as line protocol.
func BenchmarkEncode(b *testing.B) {
	p := ServerPoint(benchWindow)
	enc := NewEncoder()
	var buf []byte
	b.ReportAllocs()
	for range b.N {
		var err error
		if buf, err = enc.Append(buf[:0], p); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkServerPoint turns one server's window into its point.
func BenchmarkServerPoint(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		if p := ServerPoint(benchWindow); len(p.Fields) == 0 {
			b.Fatal("no fields")
		}
	}
}
