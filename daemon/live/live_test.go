package live

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/schema"
	"github.com/tpsmon/tpsmon/window"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func closedServer(name string, start time.Time, tps float64) analysis.Closed {
	return analysis.Closed{Start: start, Servers: []analysis.ServerWindow{{State: schema.StateOK,
		ServerWindow: window.ServerWindow{Start: start, Host: "h", Server: name, SystemTPS: window.Some(tps),
			Tokens: window.Some(int64(tps * 10))}}}}
}

func closedGPU(label string, start time.Time, server string) analysis.Closed {
	return analysis.Closed{Start: start, GPUs: []analysis.GPUWindow{{GPUWindow: window.GPUWindow{Start: start, Host: "h",
		Label: label, UUID: "GPU-" + label, Server: server, Util: window.Some(50.0)}}}}
}

func scrape(at time.Time, gen, prompt, itlSum, itlCount, running float64) sample.Server {
	var s sample.Server
	s.Time, s.Engine, s.Model = at, "vllm", "m"
	s.SetCounter(sample.GenerationTokens, gen)
	s.SetCounter(sample.PromptTokens, prompt)
	s.SetCounter(sample.ITLSum, itlSum)
	s.SetCounter(sample.ITLCount, itlCount)
	s.SetGauge(sample.Running, running)
	return s
}

func TestViewHistoryAndOpenWindow(t *testing.T) {
	now := t0.Add(35 * time.Second)
	v := New("h", 10*time.Second, func() time.Time { return now })
	for i := range 3 {
		start := t0.Add(time.Duration(i) * 10 * time.Second)
		if err := v.WriteWindows([]analysis.Closed{closedGPU("0", start, "a"), closedServer("a", start, float64(100*(i+1)))}); err != nil {
			t.Fatal(err)
		}
	}
	// Scrapes: one before the open window (the base), two in it.
	v.Server("a", scrape(t0.Add(29*time.Second), 1000, 50, 10, 100, 4))
	v.Server("a", scrape(t0.Add(31*time.Second), 1400, 90, 12, 160, 6))
	v.Server("a", scrape(t0.Add(34*time.Second), 1500, 100, 14, 200, 8))
	v.GPUs([]sample.GPU{{Time: t0.Add(34 * time.Second), Index: 0, UUID: "GPU-0", Name: "H100", UtilPct: 77,
		Throttle: 4, Has: sample.FieldUtil | sample.FieldThrottle}})

	w := v.Snapshot(2)
	if w.Host != "h" || w.WindowSeconds != 10 || !w.Now.Equal(now) {
		t.Errorf("header: %+v", w)
	}
	if len(w.Closed) != 4 {
		t.Fatalf("history 2 of 2 series: %d points, want 4", len(w.Closed))
	}
	for i := 1; i < len(w.Closed); i++ {
		if w.Closed[i].Time.Before(w.Closed[i-1].Time) {
			t.Errorf("closed points not oldest first: %v after %v", w.Closed[i].Time, w.Closed[i-1].Time)
		}
	}
	if v, _ := w.Closed[3].Float(schema.FieldSystemTPS); w.Closed[3].Measurement != schema.Server || v != 300 {
		t.Errorf("newest server window: %+v", w.Closed[3])
	}
	if len(w.Open) != 2 {
		t.Fatalf("open: %+v", w.Open)
	}
	srv, gpu := w.Open[0], w.Open[1]
	if !srv.Time.Equal(t0.Add(30*time.Second)) || srv.Tags[schema.TagServer] != "a" || srv.Tags[schema.TagEngine] != "vllm" {
		t.Errorf("open server point: %+v", srv)
	}
	// 500 tokens over the 5 s since the last scrape before the window.
	for k, want := range map[string]float64{schema.FieldSystemTPS: 100, schema.FieldTokens: 500, schema.FieldPromptTPS: 10, schema.FieldPerUserTPS: 25, schema.FieldRunning: 8} {
		if got, ok := srv.Float(k); !ok || got != want {
			t.Errorf("open %s = %v (%v), want %v", k, got, ok, want)
		}
	}
	if got, _ := gpu.Float(schema.FieldUtil); gpu.Tags[schema.TagGPU] != "0" || got != 77 {
		t.Errorf("open GPU point: %+v", gpu)
	}
	if _, ok := gpu.Fields[schema.FieldPowerW]; ok {
		t.Error("a reading the GPU does not have must be absent, not zero")
	}

	// The next window closes: the open window moves on, and the scrapes
	// before it no longer count.
	if err := v.WriteWindows([]analysis.Closed{closedServer("a", t0.Add(30*time.Second), 100)}); err != nil {
		t.Fatal(err)
	}
	w = v.Snapshot(api.MaxHistory)
	if len(w.Open) != 1 || w.Open[0].Measurement != schema.GPU {
		t.Errorf("the server has no scrape in the new open window yet, the GPU's latest reading stands: got %+v", w.Open)
	}
	// A window later, the GPU's reading is stale and goes too.
	v.WriteWindows([]analysis.Closed{closedServer("a", t0.Add(40*time.Second), 100)})
	if w := v.Snapshot(1); len(w.Open) != 0 {
		t.Errorf("a reading older than a window is no longer shown: %+v", w.Open)
	}
	if len(w.Closed) != 7 {
		t.Errorf("all history: %d points, want 7", len(w.Closed))
	}
}

func TestViewCounterReset(t *testing.T) {
	v := New("h", 10*time.Second, nil)
	v.Server("a", scrape(t0.Add(1*time.Second), 1000, 0, 0, 0, 1))
	v.Server("a", scrape(t0.Add(2*time.Second), 10, 0, 0, 0, 1))
	p := v.Snapshot(1).Open[0]
	if !p.Time.Equal(t0) {
		t.Errorf("before any window closed, the open window is the first reading's: %v, want %v", p.Time, t0)
	}
	if _, ok := p.Fields[schema.FieldSystemTPS]; ok {
		t.Errorf("a counter that went down (server restart) gives no rate, got %v", p.Fields)
	}
}

func TestViewForgetsGoneSeries(t *testing.T) {
	v := New("h", time.Second, nil)
	v.WriteWindows([]analysis.Closed{closedServer("gone", t0, 1)})
	for i := 1; i <= api.MaxHistory; i++ {
		v.WriteWindows([]analysis.Closed{closedServer("kept", t0.Add(time.Duration(i)*time.Second), 1)})
	}
	for _, p := range v.Snapshot(1).Closed {
		if p.Tags[schema.TagServer] == "gone" {
			t.Error("a series silent for the whole history should be forgotten")
		}
	}
	if n := len(v.Snapshot(api.MaxHistory).Closed); n != api.MaxHistory {
		t.Errorf("history of one series: %d windows, want %d", n, api.MaxHistory)
	}
}

func TestServeHTTP(t *testing.T) {
	v := New("h", 10*time.Second, nil)
	v.WriteWindows([]analysis.Closed{closedServer("a", t0, 5), closedServer("a", t0.Add(10*time.Second), 6)})
	srv := httptest.NewServer(v)
	defer srv.Close()
	for _, tc := range []struct {
		method, query string
		code          int
		body          string
	}{
		{"GET", "", 200, `"system_tps":6`},
		{"GET", "?history=2", 200, `"system_tps":5`},
		{"GET", "?history=0", 400, "history=\"0\": want a whole number from 1 to 60"},
		{"GET", "?history=x", 400, "want a whole number"},
		{"POST", "", 405, "read-only"},
		{"DELETE", "", 405, "read-only"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+api.WindowsPath+tc.query, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.body) {
			t.Errorf("%s %s: %d %s, want %d with %q", tc.method, tc.query, resp.StatusCode, b, tc.code, tc.body)
		}
		if tc.code == 200 {
			var w api.Windows
			if err := json.Unmarshal(b, &w); err != nil || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("not JSON windows: %v %s", err, resp.Header.Get("Content-Type"))
			}
			if tc.query == "" && len(w.Closed) != 1 {
				t.Errorf("default history is 1 window per series, got %d", len(w.Closed))
			}
		}
	}
}
