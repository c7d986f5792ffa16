package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/replay"
	"github.com/tpsmon/tpsmon/sink"
)

func TestReplayMetricsDirAndGPUCSV(t *testing.T) {
	var out, warn bytes.Buffer
	jo := sink.NewJSONWriter(&out)
	err := runReplay(replayOpts{metricsDir: "testdata/replay/metrics", gpuCSV: "testdata/replay/gpu.csv",
		window: 10 * time.Second, server: "r", engine: "auto", gpus: []string{"0"}, host: "h", tz: "UTC"}, jo, &warn)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warn.String(), "1700000020500.prom") || !strings.Contains(warn.String(), "malformed") {
		t.Errorf("the malformed scrape was not reported: %q", warn.String())
	}
	var servers, gpus []sink.JSONPoint
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p sink.JSONPoint
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if p.Measurement == "tpsmon_server" {
			servers = append(servers, p)
		} else {
			gpus = append(gpus, p)
		}
	}
	// Scrapes at x.5 s from 0.5 to 25.5 at 120 tokens/s; the one at 20.5 is
	// malformed, which the 2 s gap it leaves bridges.
	wantTokens := []float64{1140, 1200, 660}
	if len(servers) != 3 || len(gpus) != 6 {
		t.Fatalf("got %d server and %d gpu points, want 3 and 6", len(servers), len(gpus))
	}
	for i, p := range servers {
		if p.Time != time.Unix(1_700_000_000+int64(10*i), 0).UTC().Format(time.RFC3339) {
			t.Errorf("window %d time %s", i, p.Time)
		}
		f := p.Fields
		if f["tokens"] != wantTokens[i] || f["system_tps"] != 120.0 || f["per_user_tps"] != 20.0 {
			t.Errorf("window %d: tokens %v tps %v per-user %v", i, f["tokens"], f["system_tps"], f["per_user_tps"])
		}
		if kv, _ := f["kv_cache_usage"].(float64); f["prompt_tps"] != 300.0 || math.Abs(kv-0.4) > 1e-9 || f["state"] != "underutilized" {
			t.Errorf("window %d fields %v", i, f)
		}
		if p.Tags["model"] != "replay/model" || p.Tags["gpus"] != "0" || p.Tags["engine"] != "vllm" {
			t.Errorf("window %d tags %v", i, p.Tags)
		}
	}
	for _, p := range gpus {
		switch p.Tags["gpu"] {
		case "0":
			if p.Fields["power_w"] != 250.0 || p.Fields["energy_j"] == nil || p.Tags["server"] != "r" {
				t.Errorf("gpu 0 %v %v", p.Tags, p.Fields)
			}
		case "1":
			// power.draw was [N/A]: absent, never zero.
			if _, ok := p.Fields["power_w"]; ok {
				t.Errorf("gpu 1 reports power it never had: %v", p.Fields)
			}
			if _, ok := p.Fields["energy_j"]; ok {
				t.Errorf("gpu 1 reports energy it never had: %v", p.Fields)
			}
			if p.Tags["server"] != "" || p.Fields["util"] != 0.0 {
				t.Errorf("gpu 1 %v %v", p.Tags, p.Fields)
			}
		}
	}
}

func TestReplayInputErrors(t *testing.T) {
	tests := []struct {
		o    replayOpts
		want string
	}{
		{replayOpts{window: time.Second}, "nothing to replay"},
		{replayOpts{metricsDir: t.TempDir(), window: time.Second, engine: "auto"}, "no <unix-ms>.prom files"},
		{replayOpts{gpuCSV: "testdata/none.csv", window: time.Second, tz: "UTC"}, "none.csv"},
		{replayOpts{gpuCSV: "testdata/replay/gpu.csv", window: time.Second, tz: "Mars/Olympus"}, "--tz"},
		{replayOpts{metricsDir: "testdata/replay/metrics", window: time.Second, engine: "vllm2"}, "--engine"},
	}
	for _, tt := range tests {
		err := runReplay(tt.o, sink.NewJSONWriter(&bytes.Buffer{}), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err %v, want %q", tt.o, err, tt.want)
		}
	}
}

func TestReplayLogLinesOnWindowEdges(t *testing.T) {
	var out, warn bytes.Buffer
	err := runReplay(replayOpts{logFile: "testdata/replay/vllm_edges.log", engine: "auto", year: 2026,
		window: 10 * time.Second, server: "v", host: "h", tz: "UTC"}, sink.NewJSONWriter(&out), &warn)
	if err != nil {
		t.Fatal(err)
	}
	var got []sink.JSONPoint
	dec := json.NewDecoder(&out)
	for dec.More() {
		var p sink.JSONPoint
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	// The line at 12:00:10 reports (12:00:00, 12:00:10]: window 12:00:00,
	// not the window 12:00:10 that holds its timestamp.
	want := []struct {
		time   string
		tokens float64
		state  string
	}{
		{"2026-03-01T12:00:00Z", 1000, "ok"},
		{"2026-03-01T12:00:10Z", 2000, "ok"},
		{"2026-03-01T12:00:20Z", 3000, "ok"},
		{"2026-03-01T12:00:30Z", 0, "ok"},
		{"2026-03-01T12:00:40Z", 500, "ok"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d windows: %+v", len(got), got)
	}
	for i, w := range want {
		f := got[i].Fields
		if got[i].Time != w.time || f["tokens"] != w.tokens || f["source"] != "log" || f["coverage"] != 1.0 {
			t.Errorf("window %d: %s %v", i, got[i].Time, f)
		}
		if f["prompt_tokens"] != 2*w.tokens || f["running"] != float64(i+1) {
			t.Errorf("window %d: prompt %v running %v", i, f["prompt_tokens"], f["running"])
		}
		if got[i].Tags["engine"] != "vllm" {
			t.Errorf("engine tag %q", got[i].Tags["engine"])
		}
	}
	// A stat line gives the system rate; per-user is its share per running stream.
	if pu := got[1].Fields["per_user_tps"]; pu != 100.0 {
		t.Errorf("per-user %v, want 200 tok/s over 2 streams", pu)
	}
}

func TestReplayLogWithoutTimestamps(t *testing.T) {
	err := runReplay(replayOpts{logFile: "../../collector/logline/testdata/llamacpp_print_timing_multiline_no_prefix.log",
		engine: "auto", window: 10 * time.Second, tz: "UTC"}, sink.NewJSONWriter(&bytes.Buffer{}), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no timestamps") {
		t.Errorf("err %v", err)
	}
}

func TestReplayVerdicts(t *testing.T) {
	for _, want := range []string{"idle", "queue_bound", "kv_bound", "underutilized", "saturated", "ok"} {
		t.Run(want, func(t *testing.T) {
			dir := filepath.Join("testdata", "scenarios", want)
			var out bytes.Buffer
			err := runReplay(replayOpts{logFile: filepath.Join(dir, "server.log"), gpuCSV: filepath.Join(dir, "gpu.csv"),
				engine: "auto", window: 10 * time.Second, server: "s", host: "h", tz: "UTC"}, sink.NewJSONWriter(&out), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(&out)
			n := 0
			for dec.More() {
				var p sink.JSONPoint
				if err := dec.Decode(&p); err != nil {
					t.Fatal(err)
				}
				if p.Measurement != "tpsmon_server" || p.Fields["coverage"] != 1.0 {
					continue
				}
				n++
				if p.Fields["state"] != want {
					t.Errorf("window %s: state %v, want %s (fields %v)", p.Time, p.Fields["state"], want, p.Fields)
				}
			}
			if n < 5 {
				t.Errorf("%d full windows, want 6", n)
			}
		})
	}
}

// runReplay replays what the flags o say.
func runReplay(o replayOpts, out replay.Writer, warn io.Writer) error {
	return replay.Run(context.Background(), o.options(), out, warn)
}
