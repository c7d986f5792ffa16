package report

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/sink/influxtest"
)

// TestContinuousQueriesRollUp creates the shipped continuous queries on a
// real InfluxDB (resampling every second instead of every 10 minutes, so
// the test need not wait) and checks the rollups of recent windows.
func TestContinuousQueriesRollUp(t *testing.T) {
	srv := influxtest.Start(t)
	influxtest.Query(t, srv.URL, "", "CREATE DATABASE tpsmon")
	// Two servers, 10-minute windows over the last two hours.
	now := time.Now().UTC()
	hour := now.Truncate(time.Hour).Add(-time.Hour) // the last full hour
	in, _ := sink.NewInflux(sink.InfluxConfig{URL: srv.URL, Bucket: "tpsmon", Timeout: 10 * time.Second})
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	wantTokens := map[string]int64{}
	wantIdle := 0
	for ts := hour.Add(-time.Hour); ts.Before(now.Add(-time.Minute)); ts = ts.Add(10 * time.Minute) {
		for i, name := range []string{"a", "b"} {
			state, tokens := "ok", int64(60000*(i+1))
			if name == "a" && ts.Minute() < 20 {
				state, tokens = "idle", 0
			}
			p := write.NewPoint("tpsmon_server", map[string]string{"host": "h", "server": name, "gpus": "0"},
				map[string]any{"tokens": tokens, "system_tps": float64(tokens) / 600, "state": state, "coverage": 1.0, "energy_j": 1000.0, "tps_per_gpu": float64(tokens) / 600}, ts)
			buf, _ = enc.Append(buf, p)
			g := write.NewPoint("tpsmon_gpu", map[string]string{"host": "h", "gpu": name, "uuid": "GPU-" + name, "server": name},
				map[string]any{"util": 50.0, "util_max": 70.0, "power_w": 300.0, "energy_j": 1000.0, "coverage": 1.0}, ts)
			buf, _ = enc.Append(buf, g)
			if !ts.Before(hour) && ts.Before(hour.Add(time.Hour)) {
				wantTokens[name] += tokens
				if state == "idle" {
					wantIdle++
				}
			}
		}
	}
	if err := in.Write(context.Background(), buf); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join("..", "packaging", "influxdb", "continuous_queries.influxql"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	cqs := 0
	for sc.Scan() {
		stmt := strings.TrimSpace(sc.Text())
		if stmt == "" || strings.HasPrefix(stmt, "--") {
			continue
		}
		stmt = strings.NewReplacer("RESAMPLE EVERY 10m", "RESAMPLE EVERY 1s", "RESAMPLE EVERY 1h", "RESAMPLE EVERY 1s").Replace(stmt)
		influxtest.Query(t, srv.URL, "tpsmon", stmt)
		if strings.HasPrefix(stmt, "CREATE CONTINUOUS QUERY") {
			cqs++
		}
	}
	f.Close()
	if cqs < 10 {
		t.Fatalf("%d continuous queries in the file", cqs)
	}
	// The CQ service runs every second; give it a while.
	deadline := time.Now().Add(60 * time.Second)
	hourly := func() []influxtest.Series {
		return influxtest.Query(t, srv.URL, "tpsmon", `SELECT "tokens", "windows" FROM "tpsmon_1h"."tpsmon_server_1h" WHERE time = `+
			hour.Format("'2006-01-02T15:04:05Z'")+` GROUP BY "server"`)
	}
	for len(hourly()) < 2 || len(influxtest.Query(t, srv.URL, "tpsmon", `SELECT * FROM "tpsmon_1d"."tpsmon_server_1d"`)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no rollups after 60 s")
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, s := range hourly() {
		row := s.Rows()[0]
		if row["tokens"].(interface{ String() string }).String() != itoa(wantTokens[s.Tags["server"]]) || row["windows"].(interface{ String() string }).String() != "6" {
			t.Errorf("hourly rollup of %s: %v, want %d tokens over 6 windows", s.Tags["server"], row, wantTokens[s.Tags["server"]])
		}
	}
	idle := influxtest.Query(t, srv.URL, "tpsmon", `SELECT sum("idle_windows") FROM "tpsmon_1h"."tpsmon_state_1h" WHERE time = `+hour.Format("'2006-01-02T15:04:05Z'"))
	if len(idle) == 0 || idle[0].Rows()[0]["sum"].(interface{ String() string }).String() != itoa(int64(wantIdle)) {
		t.Errorf("idle windows rolled up: %v, want %d", idle, wantIdle)
	}
	if g := influxtest.Query(t, srv.URL, "tpsmon", `SELECT "util" FROM "tpsmon_1h"."tpsmon_gpu_1h"`); len(g) == 0 {
		t.Error("no GPU rollup")
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
