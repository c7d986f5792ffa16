package sink

import (
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"
)

func BenchmarkEncode(b *testing.B) {
	p := write.NewPoint("tpsmon_server", map[string]string{"host": "node-a", "server": "llama-70b", "engine": "vllm", "model": "meta-llama/Llama-3.1-70B-Instruct", "gpus": "0,1,2,3"},
		map[string]any{"tokens": int64(12345), "system_tps": 1234.5, "per_user_tps": 45.6, "prompt_tokens": int64(40000), "prompt_tps": 4000.0,
			"running": 27.3, "waiting": 1.2, "kv_cache_usage": 0.83, "gpu_util": 78.0, "gpu_util_max": 99.0, "mem_used_bytes": int64(300 << 30),
			"power_w": 2400.0, "energy_j": 24000.0, "tokens_per_joule": 0.51, "tps_per_gpu": 308.6, "state": "ok", "coverage": 1.0, "source": "metrics"},
		time.Unix(1_700_000_000, 0))
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
