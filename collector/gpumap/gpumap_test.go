package gpumap

import (
	"reflect"
	"testing"
)

func TestResolve(t *testing.T) {
	gpus := func(pids map[string][]int, uuids ...string) []GPU {
		var out []GPU
		for i, u := range uuids {
			out = append(out, GPU{Index: i, UUID: u, PIDs: pids[u]})
		}
		return out
	}
	tests := []struct {
		name    string
		root    string
		servers []Server
		gpus    []GPU
		want    map[string][]string
	}{
		{
			name:    "vLLM TP=2: the workers hold the GPUs; GPU-c is idle",
			root:    "testdata/vllm_tp2",
			servers: []Server{{"llama-70b", 8000}},
			gpus:    gpus(map[string][]int{"GPU-a": {102}, "GPU-b": {103}}, "GPU-a", "GPU-b", "GPU-c"),
			want:    map[string][]string{"llama-70b": {"GPU-a", "GPU-b"}},
		},
		{
			name:    "two servers on one node, one of them on IPv6",
			root:    "testdata/two_servers",
			servers: []Server{{"vllm", 8000}, {"sglang", 30000}},
			gpus:    gpus(map[string][]int{"GPU-a": {201}, "GPU-c": {301}, "GPU-d": {302}}, "GPU-a", "GPU-b", "GPU-c", "GPU-d"),
			want:    map[string][]string{"vllm": {"GPU-a"}, "sglang": {"GPU-c", "GPU-d"}},
		},
		{
			name:    "container: NVML's PIDs do not resolve, renumbered CUDA_VISIBLE_DEVICES does",
			root:    "testdata/container",
			servers: []Server{{"tgi", 3000}},
			gpus:    gpus(map[string][]int{"GPU-d": {7}}, "GPU-a", "GPU-b", "GPU-c", "GPU-d"),
			want:    map[string][]string{"tgi": {"GPU-d"}},
		},
		{
			name:    "a server whose port nobody listens on",
			root:    "testdata/vllm_tp2",
			servers: []Server{{"gone", 9999}},
			gpus:    gpus(nil, "GPU-a"),
			want:    map[string][]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.root, tt.servers, tt.gpus)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResolveMissingRoot(t *testing.T) {
	if _, err := Resolve("testdata/none", nil, nil); err == nil {
		t.Error("no error for a missing proc root")
	}
}
