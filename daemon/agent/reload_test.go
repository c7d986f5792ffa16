package agent

import (
	"context"
	"os"
	"reflect"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sim/vllmsim"
)

// recorder keeps every window written.
type recorder struct {
	mu sync.Mutex
	cs []analysis.Closed
}

func (r *recorder) WriteWindows(cs []analysis.Closed) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cs = append(r.cs, cs...)
	return nil
}

// tokens returns the tokens of server's windows by start (Unix s).
func (r *recorder) tokens(server string) map[int64]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int64]int64{}
	for _, c := range r.cs {
		for _, w := range c.Servers {
			if w.Server == server && w.Tokens.OK {
				out[w.Start.Unix()] = w.Tokens.V
			}
		}
	}
	return out
}

// A reload that renames a server, its source unchanged, keeps the window
// open at that moment: whole under the new name, nothing lost between the
// names, nothing counted twice.
// It runs in a bubble (bubble_test.go).
func TestReloadRenameKeepsOpenWindow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, reloadRename)
}

func reloadRename(t *testing.T) {
	const rate = 200.0
	client := handlerClient(&vllmsim.Driven{Rate: rate, Start: time.Now().Add(-time.Hour), ResetAt: time.Now().Add(time.Hour)})
	cfg := bubbleConfig(t)
	cfg.Window, cfg.Grace, cfg.GPU.Backend = time.Second, 300*time.Millisecond, "none"
	cfg.Servers = []config.ServerConfig{{Name: "old", Engine: "vllm", MetricsURL: "http://llm/metrics", ScrapeInterval: 50 * time.Millisecond}}
	renamed := *cfg
	renamed.Servers = []config.ServerConfig{cfg.Servers[0]}
	renamed.Servers[0].Name = "new"

	out := &recorder{}
	reload := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- newAgent(cfg, Options{Outputs: []WindowWriter{out}, Reload: reload,
			Load: func() (*config.Config, error) { c := renamed; return &c, nil }}, hooks{client: client}).Run(ctx)
	}()
	// Reload in the middle of the second whole window.
	at := time.Now().Truncate(time.Second).Add(2500 * time.Millisecond)
	time.Sleep(time.Until(at))
	reload <- syscall.SIGHUP
	open := at.Unix() // the window open at the reload
	deadline := time.Now().Add(10 * time.Second)
	for out.tokens("new")[open+1] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no window after the reload under the new name: %v", out.tokens("new"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	old, cur := out.tokens("old"), out.tokens("new")
	t.Logf("old %v; new %v; reload at %s", old, cur, at.Format("15:04:05.000"))
	if _, twice := old[open]; twice {
		t.Errorf("the window open at the reload written under both names")
	}
	if old[open-1] < rate*0.8 {
		t.Errorf("the window before the reload: %d tokens under the old name, want about %.0f", old[open-1], rate)
	}
	// The open window whole under the new name: no tokens lost at the
	// rename (a fresh server would start from its first scrape after it).
	for _, w := range []int64{open, open + 1} {
		if n := cur[w]; n < rate*0.85 || n > rate*1.15 {
			t.Errorf("window %s: %d tokens under the new name, want about %.0f", time.Unix(w, 0).Format("15:04:05"), n, rate)
		}
	}
}

func TestRenamedPairsSameSourceOnly(t *testing.T) {
	srv := func(name, url, file string) config.ServerConfig {
		return config.ServerConfig{Name: name, MetricsURL: url, Log: config.LogSourceConfig{File: file}}
	}
	tests := []struct {
		name     string
		old, new []config.ServerConfig
		want     map[string]string
	}{
		{"renamed", []config.ServerConfig{srv("a", "http://h:1/metrics", "")}, []config.ServerConfig{srv("b", "http://h:1/metrics", "")},
			map[string]string{"a": "b"}},
		{"renamed log source", []config.ServerConfig{srv("a", "", "/var/log/x.log")}, []config.ServerConfig{srv("b", "", "/var/log/x.log")},
			map[string]string{"a": "b"}},
		{"renamed and moved: another server", []config.ServerConfig{srv("a", "http://h:1/metrics", "")},
			[]config.ServerConfig{srv("b", "http://h:2/metrics", "")}, map[string]string{}},
		{"kept", []config.ServerConfig{srv("a", "http://h:1/metrics", "")}, []config.ServerConfig{srv("a", "http://h:1/metrics", "")},
			map[string]string{}},
		{"one source, two new names: not guessed", []config.ServerConfig{srv("a", "http://h:1/metrics", "")},
			[]config.ServerConfig{srv("b", "http://h:1/metrics", ""), srv("c", "http://h:1/metrics", "")}, map[string]string{}},
		{"dropped", []config.ServerConfig{srv("a", "http://h:1/metrics", ""), srv("b", "http://h:2/metrics", "")},
			[]config.ServerConfig{srv("a", "http://h:1/metrics", "")}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := renamed(&config.Config{Servers: tt.old}, &config.Config{Servers: tt.new})
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("renamed = %v, want %v", got, tt.want)
			}
		})
	}
}
