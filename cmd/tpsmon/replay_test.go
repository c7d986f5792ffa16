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

	"github.com/tpsmon/tpsmon/daemon/replay"
	"github.com/tpsmon/tpsmon/schema"
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
		if p.Measurement == schema.Server {
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
		if f[schema.FieldTokens] != wantTokens[i] || f[schema.FieldSystemTPS] != 120.0 || f[schema.FieldPerUserTPS] != 20.0 {
			t.Errorf("window %d: tokens %v tps %v per-user %v", i, f[schema.FieldTokens], f[schema.FieldSystemTPS], f[schema.FieldPerUserTPS])
		}
		if kv, _ := f[schema.FieldKVCacheUsage].(float64); f[schema.FieldPromptTPS] != 300.0 || math.Abs(kv-0.4) > 1e-9 || f[schema.FieldState] != schema.StateUnderutilized {
			t.Errorf("window %d fields %v", i, f)
		}
		if p.Tags[schema.TagModel] != "replay/model" || p.Tags[schema.TagGPUs] != "0" || p.Tags[schema.TagEngine] != "vllm" {
			t.Errorf("window %d tags %v", i, p.Tags)
		}
	}
	for _, p := range gpus {
		switch p.Tags[schema.TagGPU] {
		case "0":
			if p.Fields[schema.FieldPowerW] != 250.0 || p.Fields[schema.FieldEnergyJ] == nil || p.Tags[schema.TagServer] != "r" {
				t.Errorf("gpu 0 %v %v", p.Tags, p.Fields)
			}
		case "1":
			// power.draw was [N/A]: absent, never zero.
			if _, ok := p.Fields[schema.FieldPowerW]; ok {
				t.Errorf("gpu 1 reports power it never had: %v", p.Fields)
			}
			if _, ok := p.Fields[schema.FieldEnergyJ]; ok {
				t.Errorf("gpu 1 reports energy it never had: %v", p.Fields)
			}
			if p.Tags[schema.TagServer] != "" || p.Fields[schema.FieldUtil] != 0.0 {
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
		if got[i].Time != w.time || f[schema.FieldTokens] != w.tokens || f[schema.FieldSource] != schema.SourceLog || f[schema.FieldCoverage] != 1.0 {
			t.Errorf("window %d: %s %v", i, got[i].Time, f)
		}
		if f[schema.FieldPromptTokens] != 2*w.tokens || f[schema.FieldRunning] != float64(i+1) {
			t.Errorf("window %d: prompt %v running %v", i, f[schema.FieldPromptTokens], f[schema.FieldRunning])
		}
		if got[i].Tags[schema.TagEngine] != "vllm" {
			t.Errorf("engine tag %q", got[i].Tags[schema.TagEngine])
		}
	}
	// A stat line gives the system rate; per-user is its share per running stream.
	if pu := got[1].Fields[schema.FieldPerUserTPS]; pu != 100.0 {
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
	for _, want := range []string{schema.StateIdle, schema.StateQueueBound, schema.StateKVBound, schema.StateUnderutilized, schema.StateSaturated, schema.StateOK} {
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
				if p.Measurement != schema.Server || p.Fields[schema.FieldCoverage] != 1.0 {
					continue
				}
				n++
				if p.Fields[schema.FieldState] != want {
					t.Errorf("window %s: state %v, want %s (fields %v)", p.Time, p.Fields[schema.FieldState], want, p.Fields)
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
