package top

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func loadWindows(t *testing.T) api.Windows {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "windows.json"))
	if err != nil {
		t.Fatal(err)
	}
	var w api.Windows
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("testdata/windows.json: %v", err)
	}
	return w
}

func plainStyles() Styles { return NewStyles(lipgloss.NewRenderer(io.Discard)) }

// TestRenderGolden draws a known set of windows (two servers up, one
// down; four GPUs, one unused, one hot) at fixed sizes.
func TestRenderGolden(t *testing.T) {
	w := loadWindows(t)
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"wide_120x30", Options{Width: 120, Height: 30, Keys: true}},
		{"narrow_80x24", Options{Width: 80, Height: 24}},
		{"tiny_50x9", Options{Width: 50, Height: 9}},
		{"sort_state", Options{Width: 120, Sort: ByState, Keys: true}},
		{"sort_tps_ascii", Options{Width: 100, Sort: ByTPS, ASCII: true}},
		{"filter", Options{Width: 120, Filter: true, Keys: true}},
		{"daemon_gone", Options{Width: 100, Height: 20, Status: "daemon not answering since 09:01:50, retrying every 1s; showing its last data: connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Loc, tc.o.Styles = time.UTC, plainStyles()
			got := Render(w, tc.o) + "\n"
			for i, l := range strings.Split(got, "\n") {
				if n := ansi.StringWidth(l); n > tc.o.Width {
					t.Errorf("line %d is %d columns wide, more than %d: %q", i+1, n, tc.o.Width, l)
				}
			}
			if tc.o.Height > 0 {
				if n := strings.Count(got, "\n"); n > tc.o.Height {
					t.Errorf("%d lines, more than the %d the terminal has", n, tc.o.Height)
				}
			}
			path := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestRenderGolden -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("rendering differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}

// TestFilterWithNothingToShow: the filter says so rather than leave an
// empty table.
func TestFilterWithNothingToShow(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	w := api.Windows{Host: "n", Now: at.Add(12 * time.Second), WindowSeconds: 10, Closed: []api.Point{
		{Measurement: schema.Server, Time: at, Tags: map[string]string{schema.TagServer: "a"}, Fields: map[string]any{schema.FieldState: schema.StateOK, schema.FieldSystemTPS: 10.0}},
		{Measurement: schema.GPU, Time: at, Tags: map[string]string{schema.TagGPU: "0", schema.TagServer: "a"}, Fields: map[string]any{schema.FieldUtil: 90.0, schema.FieldThrottle: 0.0}},
	}}
	got := Render(w, Options{Width: 100, Filter: true, Styles: plainStyles()})
	for _, want := range []string{"(none of 1 servers needs a look: f shows all)", "(none of 1 GPUs needs a look: f shows all)"} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
}

// MBU% is a column only when a server has an MBU, and shows it in percent.
func TestMBUColumnOnlyWithAnMBU(t *testing.T) {
	with := []serverRow{{name: "a", mbu: 0.634, tps: unknown, now: unknown, user: unknown, running: unknown, waiting: unknown,
		kv: unknown, prompt: unknown, tpj: unknown}}
	lines := table(serverColumns(4, 200, Options{}, anyMBU(with), false), with, Styles{})
	if !strings.Contains(lines[0], "MBU%") || !strings.Contains(lines[1], " 63 ") {
		t.Errorf("with an MBU:\n%s", strings.Join(lines, "\n"))
	}
	without := []serverRow{with[0]}
	without[0].mbu = unknown
	lines = table(serverColumns(4, 200, Options{}, anyMBU(without), false), without, Styles{})
	if strings.Contains(lines[0], "MBU%") {
		t.Errorf("without an MBU:\n%s", strings.Join(lines, "\n"))
	}
}

// TestSuspectAndSleeping: a suspect server needs a look and its rules
// follow the table; a sleeping one is as quiet as an idle one.
func TestSuspectAndSleeping(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	w := api.Windows{Host: "n", Now: at.Add(12 * time.Second), WindowSeconds: 10, Closed: []api.Point{
		{Measurement: schema.Server, Time: at, Tags: map[string]string{schema.TagServer: "a"},
			Fields: map[string]any{schema.FieldState: schema.StateOK, schema.FieldSystemTPS: 10.0, schema.FieldSuspect: "gpu_idle"}},
		{Measurement: schema.Server, Time: at, Tags: map[string]string{schema.TagServer: "b"},
			Fields: map[string]any{schema.FieldState: schema.StateSleeping}},
	}}
	got := Render(w, Options{Width: 100, Filter: true, Styles: plainStyles()})
	if !strings.Contains(got, "suspect a: gpu_idle") {
		t.Errorf("lacks the suspect line:\n%s", got)
	}
	if strings.Contains(got, " b ") || strings.Contains(got, schema.StateSleeping) {
		t.Errorf("the sleeping server shows among those that need a look:\n%s", got)
	}
	if all := Render(w, Options{Width: 100, Styles: plainStyles()}); !strings.Contains(all, schema.StateSleeping) {
		t.Errorf("sleeping not shown in the full table:\n%s", all)
	}
}

// TestTTFTBasisSaid: a TTFT a log counts from later than the request's
// arrival says so under the table; one from the arrival, or from a
// histogram (no basis), says nothing.
func TestTTFTBasisSaid(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	server := func(name, basis string) api.Point {
		f := map[string]any{schema.FieldState: schema.StateOK, schema.FieldSystemTPS: 10.0, schema.FieldTTFTP90: 0.25}
		if basis != "" {
			f[schema.FieldTTFTBasis] = basis
		}
		return api.Point{Measurement: schema.Server, Time: at, Tags: map[string]string{schema.TagServer: name}, Fields: f}
	}
	w := api.Windows{Host: "n", Now: at.Add(12 * time.Second), WindowSeconds: 10,
		Closed: []api.Point{server("s", "slot"), server("p", "prefill"), server("h", "http"), server("g", "")}}
	got := Render(w, Options{Width: 160, Styles: plainStyles()})
	for _, want := range []string{"s: TTFT90 counts from the request's slot", "p: TTFT90 counts its prompt's evaluation only"} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"h: TTFT90", "g: TTFT90"} {
		if strings.Contains(got, not) {
			t.Errorf("says %q of a TTFT from the arrival or a histogram:\n%s", not, got)
		}
	}
}
