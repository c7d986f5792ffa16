package accuracy

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// TestPromptSplitAgainstClient replays the real Ollama recording (Ollama
// 0.34.1 relaying llama-server at verbosity 4, which logs where each
// prompt's processing starts: the tokens its slot's cache held) and holds
// the prompt split to what the server told the client, request by
// request, summed over the run: computed + cached = the responses'
// prompt_eval_count (Ollama >= 0.30 adds cache_n to prompt_n), cached =
// their prompt_eval_cached_count (testdata/ollama-default/prompt-counts,
// from the recording's client-records.json: id, prompt_eval_count,
// prompt_eval_cached_count). prompt_tokens stays the computed count, and
// prefix_hit_rate is cached over all of the window's.
func TestPromptSplitAgainstClient(t *testing.T) {
	var wantAll, wantCached float64
	f, err := os.Open(filepath.Join("testdata", "ollama-default", "prompt-counts.txt.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(z)
	n := 0
	for sc.Scan() {
		var id int
		var all, cached float64
		if _, err := fmt.Sscan(sc.Text(), &id, &all, &cached); err != nil {
			t.Fatalf("prompt-counts line %q: %v", sc.Text(), err)
		}
		wantAll, wantCached, n = wantAll+all, wantCached+cached, n+1
	}
	if n == 0 || wantCached == 0 {
		t.Fatalf("%d requests, %v cached: not the recording", n, wantCached)
	}
	pts, _ := replayed(t, "--log", gunzip(t, "ollama-default/ollama.log.gz"))
	var comp, cached, prompt float64
	split := 0
	for _, p := range pts {
		c, okC := p.num("prompt_computed_tokens")
		h, okH := p.num("prompt_cached_tokens")
		if okC != okH {
			t.Fatalf("%v: half a split: computed %v (%v), cached %v (%v)", p.Time, c, okC, h, okH)
		}
		if !okC {
			continue
		}
		split++
		comp, cached = comp+c, cached+h
		pt, _ := p.num("prompt_tokens")
		prompt += pt
		if pt != c {
			t.Errorf("%v: prompt_tokens %v, want the computed %v", p.Time, pt, c)
		}
		// The rate is of the window's tokens before they are rounded to
		// the integers written (a prompt spread over its slot's windows
		// is fractional in each): within one token of theirs.
		if r, ok := p.num("prefix_hit_rate"); c+h > 0 && (!ok || math.Abs(r-h/(c+h)) > 1/(c+h)) {
			t.Errorf("%v: prefix_hit_rate %v (%v), want %v", p.Time, r, ok, h/(c+h))
		}
	}
	t.Logf("%d requests: client prompt_eval_count %v (cached %v); tpsmon computed %v + cached %v in %d windows",
		n, wantAll, wantCached, comp, cached, split)
	if comp+cached != wantAll || cached != wantCached {
		t.Errorf("computed %v + cached %v = %v, want the client's %v with %v cached", comp, cached, comp+cached, wantAll, wantCached)
	}
}
