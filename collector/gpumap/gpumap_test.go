package gpumap

import (
	"reflect"
	"strings"
	"testing"
)

func gpuList(pids map[string][]int, uuids ...string) []GPU {
	var out []GPU
	for i, u := range uuids {
		out = append(out, GPU{Index: i, UUID: u, PIDs: pids[u]})
	}
	return out
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name    string
		root    string
		servers []Server
		gpus    []GPU
		want    map[string]Placement
	}{
		{
			name:    "vLLM TP=2: the workers hold the GPUs; GPU-c is idle",
			root:    "testdata/vllm_tp2",
			servers: []Server{{"llama-70b", 8000}},
			gpus:    gpuList(map[string][]int{"GPU-a": {102}, "GPU-b": {103}}, "GPU-a", "GPU-b", "GPU-c"),
			want:    map[string]Placement{"llama-70b": {GPUs: []string{"GPU-a", "GPU-b"}, By: BySocket, PID: 100}},
		},
		{
			name:    "two servers on one node, one of them on IPv6",
			root:    "testdata/two_servers",
			servers: []Server{{"vllm", 8000}, {"sglang", 30000}},
			gpus:    gpuList(map[string][]int{"GPU-a": {201}, "GPU-c": {301}, "GPU-d": {302}}, "GPU-a", "GPU-b", "GPU-c", "GPU-d"),
			want: map[string]Placement{"vllm": {GPUs: []string{"GPU-a"}, By: BySocket, PID: 200},
				"sglang": {GPUs: []string{"GPU-c", "GPU-d"}, By: BySocket, PID: 300}},
		},
		{
			name:    "container: NVML's PIDs do not resolve, renumbered CUDA_VISIBLE_DEVICES does",
			root:    "testdata/container",
			servers: []Server{{"tgi", 3000}},
			gpus:    gpuList(map[string][]int{"GPU-d": {7}}, "GPU-a", "GPU-b", "GPU-c", "GPU-d"),
			want:    map[string]Placement{"tgi": {GPUs: []string{"GPU-d"}, By: BySocket, PID: 400}},
		},
		{
			name:    "a server whose port nobody listens on",
			root:    "testdata/vllm_tp2",
			servers: []Server{{"gone", 9999}},
			gpus:    gpuList(nil, "GPU-a"),
			want:    map[string]Placement{},
		},
		{
			name:    "another user's vLLM: the top process naming --port, not its forked EngineCore that repeats it",
			root:    "testdata/other_users",
			servers: []Server{{"vllm", 8000}},
			gpus:    gpuList(map[string][]int{"GPU-a": {102}, "GPU-b": {103}}, "GPU-a", "GPU-b"),
			want:    map[string]Placement{"vllm": {GPUs: []string{"GPU-a", "GPU-b"}, By: ByCmdline, PID: 100}},
		},
		{
			name:    "another user's only server, port from a config file: its one GPU process tree",
			root:    "testdata/other_users",
			servers: []Server{{"llama", 8080}},
			gpus:    gpuList(map[string][]int{"GPU-b": {200}}, "GPU-a", "GPU-b"),
			want:    map[string]Placement{"llama": {GPUs: []string{"GPU-b"}, By: ByOwner, PID: 200}},
		},
		{
			name:    "another user's CPU-only server: nothing to place, nothing to say",
			root:    "testdata/other_users",
			servers: []Server{{"cpu", 30000}},
			gpus:    gpuList(map[string][]int{"GPU-a": {102}}, "GPU-a"),
			want:    map[string]Placement{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve(tt.root, tt.servers, tt.gpus)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Placed, tt.want) || len(got.Unplaced) != 0 {
				t.Errorf("got %v (unplaced %v), want %v", got.Placed, got.Unplaced, tt.want)
			}
		})
	}
}

// What is not certain is not guessed: the server stays unplaced, with the
// reason.
func TestResolveRefusesToGuess(t *testing.T) {
	tests := []struct {
		name    string
		servers []Server
		gpus    []GPU
		placed  []string
		server  string
		why     []string
	}{
		{
			name:    "one user listens for two servers, one names its port",
			servers: []Server{{"vllm", 8000}, {"other", 8001}},
			gpus:    gpuList(map[string][]int{"GPU-a": {102}, "GPU-b": {111}}, "GPU-a", "GPU-b"),
			placed:  []string{"vllm"},
			server:  "other",
			why:     []string{"port 8001 is listened on by uid 1001", "/proc/PID/fd", "other configured servers too (vllm)"},
		},
		{
			name:    "the owner's GPU processes in two trees: the server's and a training job's",
			servers: []Server{{"llama", 8080}},
			gpus:    gpuList(map[string][]int{"GPU-a": {200}, "GPU-b": {211}}, "GPU-a", "GPU-b"),
			server:  "llama",
			why:     []string{"uid 1002", "2 separate process trees (200, 210)"},
		},
		{
			name:    "a root-owned socket (docker-proxy)",
			servers: []Server{{"proxied", 9000}},
			gpus:    gpuList(map[string][]int{"GPU-a": {102}}, "GPU-a"),
			server:  "proxied",
			why:     []string{"uid 0", "root's processes are not told apart"},
		},
		{
			name:    "the owner's processes hidden",
			servers: []Server{{"hidden", 9100}},
			gpus:    gpuList(map[string][]int{"GPU-a": {102}}, "GPU-a"),
			server:  "hidden",
			why:     []string{"no process of uid 1003 is visible", "hidepid"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Resolve("testdata/other_users", tt.servers, tt.gpus)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range tt.placed {
				if _, ok := got.Placed[name]; !ok {
					t.Errorf("%s not placed: %v", name, got.Unplaced[name])
				}
			}
			if p, ok := got.Placed[tt.server]; ok {
				t.Fatalf("%s placed by %s on %v: a guess", tt.server, p.By, p.GPUs)
			}
			why := got.Unplaced[tt.server]
			for _, w := range tt.why {
				if !strings.Contains(why, w) {
					t.Errorf("reason %q lacks %q", why, w)
				}
			}
			if len(got.Unplaced) != 1 {
				t.Errorf("unplaced %v, want only %s", got.Unplaced, tt.server)
			}
		})
	}
}

func TestNamesPort(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"vllm", "serve", "m", "--port", "8000"}, true},
		{[]string{"llama-server", "--port=8000"}, true},
		{[]string{"llama-server", "--port", "80000"}, false},
		{[]string{"x", "--port"}, false},
		{[]string{"x", "--metrics-port", "8000"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := namesPort(tt.args, 8000); got != tt.want {
			t.Errorf("namesPort(%q) = %v", tt.args, got)
		}
	}
}

func TestResolveMissingRoot(t *testing.T) {
	if _, err := Resolve("testdata/none", nil, nil); err == nil {
		t.Error("no error for a missing proc root")
	}
}
