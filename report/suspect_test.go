package report

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// TestReportCountsSuspectWindows: the report counts each server's suspect
// windows by rule and says so in its findings; a server no rule doubted
// has none.
func TestReportCountsSuspectWindows(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "suspect")
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: db, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	suspect := []string{"gpu_idle", "gpu_idle,activity_zero", "", "gpu_idle"}
	for i, sus := range suspect {
		ts := start.Add(time.Duration(i) * time.Minute)
		for _, server := range []string{"a", "b"} {
			f := map[string]any{schema.FieldTokens: int64(600), schema.FieldSystemTPS: 10.0, schema.FieldState: schema.StateOK,
				schema.FieldCoverage: 1.0, schema.FieldWindowS: 60.0, schema.FieldGPUUtil: 0.0}
			if server == "a" && sus != "" {
				f[schema.FieldSuspect] = sus
			}
			p := write.NewPoint(schema.Server, map[string]string{schema.TagHost: "h", schema.TagServer: server, schema.TagGPUs: "0"}, f, ts)
			if buf, err = enc.AppendWrite(buf, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := in.Write(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
	r, err := Build(context.Background(), NewClient(base, db, "", 30*time.Second),
		Filter{From: start, To: start.Add(time.Hour), Interval: time.Minute}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Servers {
		switch s.Server {
		case "a":
			if s.Suspect["gpu_idle"] != 3 || s.Suspect["activity_zero"] != 1 || len(s.Suspect) != 2 {
				t.Errorf("a: suspect %v, want gpu_idle 3, activity_zero 1", s.Suspect)
			}
		case "b":
			if s.Suspect != nil {
				t.Errorf("b: suspect %v, want none", s.Suspect)
			}
		}
	}
	joined := strings.Join(r.Findings, "\n")
	if !strings.Contains(joined, "server a on h had windows a sanity rule doubts (activity_zero 1, gpu_idle 3)") || strings.Contains(joined, "server b on h had") {
		t.Errorf("findings:\n%s", joined)
	}
}
