package sink

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink/influxtest"
	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/window"
)

// TestLongModelNameStored is issue 28's 70 KB model_name label: the real
// InfluxDB refuses a series key over 64 KiB, so every point of that server
// was quarantined. Cut to a prefix and a hash, they are stored, and two
// long names that differ only at their end stay two series.
func TestLongModelNameStored(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "longtag")
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	in, _ := NewInflux(InfluxConfig{URL: base, Bucket: db + "/autogen", Timeout: 5 * time.Second})
	defer in.Close()
	s := &Sender{Spool: sp, W: in, Log: quiet()}
	long := strings.Repeat("m", 70<<10)
	models := []string{long + "-a", long + "-b"}
	start := time.Unix(1_700_000_000, 0)
	var cs []window.Closed
	for i, m := range models {
		at := start.Add(time.Duration(i) * time.Second)
		cs = append(cs, window.Closed{Start: at, Servers: []window.ServerWindow{{Start: at, Length: time.Second,
			Host: "h", Server: "llm", Engine: "vllm", Model: m, Tokens: window.Some(int64(i + 1)),
			State: schema.StateOK, Source: schema.SourceMetrics}}})
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
