package sink

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
	"github.com/tpsmon/tpsmon/window"
)

// TestLongModelNameStored is issue 28's 70 KB model_name label: the real
// InfluxDB refuses a series key over 64 KiB, so every point of that server
// was quarantined. Cut to a prefix and a hash, they are stored, and two
// long names that differ only at their end stay two series.
func TestLongModelNameStored(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "longtag")
	sp, s := realSender(t, base, db, spool.Options{Dir: t.TempDir()})
	long := strings.Repeat("m", 70<<10)
	models := []string{long + "-a", long + "-b"}
	start := time.Unix(1_700_000_000, 0)
	var cs []analysis.Closed
	for i, m := range models {
		at := start.Add(time.Duration(i) * time.Second)
		cs = append(cs, analysis.Closed{Start: at, Servers: []analysis.ServerWindow{{State: schema.StateOK, ServerWindow: window.ServerWindow{Start: at, Length: time.Second,
			Host: "h", Server: "llm", Engine: "vllm", Model: m, Tokens: window.Some(int64(i + 1)),
			Source: schema.SourceMetrics}}}})
	}
	if err := NewSpoolWriter(sp, s).WriteWindows(cs); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q := sp.Stats().Quarantined; q != 0 {
		t.Errorf("%d points quarantined, want none", q)
	}
	rows := influxtest.Query(t, base, db, "SELECT tokens, model FROM tpsmon_server")
	if len(rows) != 1 || len(rows[0].Rows()) != len(models) {
		t.Fatalf("InfluxDB holds %v, want %d points", rows, len(models))
	}
	seen := map[string]bool{}
	for _, r := range rows[0].Rows() {
		got, _ := r[schema.TagModel].(string)
		i := int(mustInt(t, r[schema.FieldTokens])) - 1
		if want := TagValue(models[i]); got != want {
			t.Errorf("point %d: model tag %.40q… (%d bytes), want %.40q… (%d bytes)", i, got, len(got), want, len(want))
		}
		if len(got) > MaxTagBytes || !strings.HasPrefix(got, "mmmm") {
			t.Errorf("point %d: model tag of %d bytes, want a prefix of at most %d", i, len(got), MaxTagBytes)
		}
		seen[got] = true
	}
	if len(seen) != len(models) {
		t.Errorf("%d distinct model tags stored for %d distinct names", len(seen), len(models))
	}
}

// TestTagValueCut: a value up to MaxTagBytes is kept, a longer one cut to
// at most MaxTagBytes of valid UTF-8 that keep its start; cutting is
// idempotent and values that differ anywhere stay distinct.
func TestTagValueCut(t *testing.T) {
	at := strings.Repeat("a", MaxTagBytes)
	tests := []struct {
		name  string
		in    string
		cut   bool
		start string // what the stored value starts with
	}{
		{"short", "Llama-3.1-8B-Instruct", false, "Llama-3.1-8B-Instruct"},
		{"at the bound", at, false, at},
		{"one byte over", at + "b", true, at[:200]},
		{"70 KB", strings.Repeat("m", 70<<10), true, strings.Repeat("m", 200)},
		{"multi-byte characters across the cut", strings.Repeat("模", 200), true, strings.Repeat("模", 70)},
		{"trailing backslash pushes it over", at[1:] + `\`, true, at[:200]},
		{"control characters and invalid UTF-8", strings.Repeat("a\n\xff", 300), true, "a \uFFFDa \uFFFD"},
	}
	hashed := regexp.MustCompile(cutSep + "[0-9a-f]{16}$")
	seen := map[string]string{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := TagValue(tc.in)
			if len(got) > MaxTagBytes || !utf8.ValidString(got) {
				t.Errorf("%d bytes (valid UTF-8: %v), want at most %d of valid UTF-8", len(got), utf8.ValidString(got), MaxTagBytes)
			}
			if again := TagValue(got); again != got {
				t.Errorf("not idempotent: %q then %q", got, again)
			}
			if hashed.MatchString(got) != tc.cut {
				t.Errorf("cut %v, want %v: %q", !tc.cut, tc.cut, got)
			}
			if !strings.HasPrefix(got, tc.start) {
				t.Errorf("%q does not start with %q", got, tc.start)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("same tag as %q", other)
			}
			seen[got] = tc.name
		})
	}
	long := strings.Repeat("x", 1000)
	if a, b := TagValue(long+"1"), TagValue(long+"2"); a == b {
		t.Errorf("values differing only at the end cut to the same tag %q", a)
	}
}
