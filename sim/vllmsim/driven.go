package vllmsim

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Driven serves a vLLM V1 metrics page whose generation counter grows at
// exactly Rate tokens/s of wall time, restarting from 0 at ResetAt: a
// server whose true throughput a test knows.
type Driven struct {
	Rate    float64
	Start   time.Time
	ResetAt time.Time
	// Malformed makes every n-th page unparsable (0: never).
	Malformed int

	mu    sync.Mutex
	pages int
}

func (d *Driven) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	base := d.Start
	if now.After(d.ResetAt) {
		base = d.ResetAt
	}
	tokens := d.Rate * now.Sub(base).Seconds()
	d.mu.Lock()
	d.pages++
	bad := d.Malformed > 0 && d.pages%d.Malformed == 0
	d.mu.Unlock()
	if bad {
		fmt.Fprint(w, "vllm:generation_tokens_total{model_name=\"m\" 12\n")
		return
	}
	fmt.Fprintf(w, `# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="test/model"} %f
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="test/model"} 10
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="test/model"} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="test/model"} 0.5
`, tokens)
}

// Pages says how many pages were served.
func (d *Driven) Pages() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pages
}
