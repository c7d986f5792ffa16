package top

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/tpsmon/tpsmon/daemon/api"
	"github.com/tpsmon/tpsmon/schema"
)

func key(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)} }

func TestModelKeysAndResize(t *testing.T) {
	m := NewModel(context.Background(), Config{Every: time.Second}, loadWindows(t), plainStyles())
	step := func(msg tea.Msg) tea.Cmd {
		t.Helper()
		nm, cmd := m.Update(msg)
		m = nm.(Model)
		return cmd
	}
	step(tea.WindowSizeMsg{Width: 60, Height: 15})
	for i, l := range strings.Split(m.View(), "\n") {
		if ansi.StringWidth(l) > 60 {
			t.Errorf("after a resize to 60x15, line %d is wider: %q", i+1, l)
		}
	}
	if n := strings.Count(m.View(), "\n") + 1; n > 15 {
		t.Errorf("after a resize to 60x15, %d lines", n)
	}
	step(tea.WindowSizeMsg{Width: 120, Height: 40})
	firstServer := func() string {
		lines := strings.Split(m.View(), "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "SERVER") {
				return strings.Fields(lines[i+1])[0]
			}
		}
		t.Fatal("no server table")
		return ""
	}
	for _, want := range []string{"sglang-8b", "vllm-70b", "trtllm-embed", "sglang-8b"} {
		if got := firstServer(); got != want {
			t.Errorf("sort %s: first row %s, want %s", m.sortKey, got, want)
		}
		step(key("s"))
	}
	before := m.sortKey
	step(key("ss")) // two keys read at once
	if want := (before + 2) % numSortKeys; m.sortKey != want {
		t.Errorf("two s at once: sort %s, want %s", m.sortKey, want)
	}
	step(key("f"))
	if v := m.View(); strings.Contains(v, "sglang-8b") || !strings.Contains(v, "UNUSED") {
		t.Errorf("f: want the idle server hidden and the unused GPU kept:\n%s", v)
	}
	step(key("f"))
	if !strings.Contains(m.View(), "sglang-8b") {
		t.Error("f again: the idle server should be back")
	}
	if cmd := step(key("q")); cmd == nil {
		t.Fatal("q: no command")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("q: the command does not quit")
	}
}

// TestModelDaemonGone: an answer that fails keeps the last data on screen
// with a line saying so; the next good answer clears it.
func TestModelDaemonGone(t *testing.T) {
	w := loadWindows(t)
	m := NewModel(context.Background(), Config{Every: time.Second}, w, plainStyles())
	nm, _ := m.Update(fetched{w: w, at: time.Date(2026, 11, 30, 9, 1, 50, 0, time.Local)})
	m = nm.(Model)
	nm, cmd := m.Update(fetched{err: errors.New("connection refused"), at: time.Date(2026, 11, 30, 9, 2, 0, 0, time.Local)})
	m = nm.(Model)
	if cmd == nil {
		t.Error("after a failed fetch, top must keep trying")
	}
	v := m.View()
	if !strings.Contains(v, "daemon not answering since 09:02:00") || !strings.Contains(v, "vllm-70b") {
		t.Errorf("want the failure line above the last data:\n%s", v)
	}
	nm, _ = m.Update(fetched{err: errors.New("connection refused"), at: time.Date(2026, 11, 30, 9, 2, 5, 0, time.Local)})
	m = nm.(Model)
	if !strings.Contains(m.View(), "since 09:02:00") {
		t.Error("the failure line should keep the time the daemon first stopped answering")
	}
	// The last window closed 4.5 s before the last good answer, which
	// came 15 s before this try.
	if v := m.View(); !strings.Contains(v, "(19.5s ago)") {
		t.Errorf("the age of the last window should go on while the daemon is gone:\n%s", v)
	}
	nm, _ = m.Update(fetched{w: w})
	m = nm.(Model)
	if strings.Contains(m.View(), "not answering") {
		t.Error("a good answer should clear the failure line")
	}
}

// TestColourIsOnlyColour: with colours the screen has escape codes (the
// states are coloured) and, without them, reads as the plain one.
func TestColourIsOnlyColour(t *testing.T) {
	w := loadWindows(t)
	r := lipgloss.NewRenderer(nil)
	r.SetColorProfile(termenv.ANSI256)
	o := Options{Width: 120, Loc: time.UTC, Styles: NewStyles(r)}
	coloured := Render(w, o)
	o.Styles = plainStyles()
	plain := Render(w, o)
	if coloured == plain {
		t.Fatal("no colour at all")
	}
	if ansi.Strip(coloured) != plain {
		t.Errorf("colour changed the text:\n%s\nvs\n%s", ansi.Strip(coloured), plain)
	}
	for _, state := range []string{"saturated", "down"} {
		i := strings.Index(coloured, state)
		if i < 0 || !strings.Contains(coloured[max(0, i-12):i], "\x1b[") {
			t.Errorf("state %s is not coloured", state)
		}
	}
}

func TestThrottleText(t *testing.T) {
	for _, tc := range []struct {
		bits int64
		want string
	}{{-1, "-"}, {0, "none"}, {1, "idle"}, {0x44, "hw-thermal,sw-power"}, {0x1000, "0x1000"}, {0x41 | 0x2000, "hw-thermal,idle,0x2000"}} {
		if got := throttleText(tc.bits); got != tc.want {
			t.Errorf("throttleText(%#x) = %q, want %q", tc.bits, got, tc.want)
		}
	}
}

func TestSparkline(t *testing.T) {
	nan := unknown
	for _, tc := range []struct {
		vals  []float64
		width int
		ascii bool
		want  string
	}{
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 8, false, "▁▂▃▄▅▆▇█"},
		{[]float64{0, 1, 2, 3, 4, 5, 6, 7}, 3, false, "▆▇█"},
		{[]float64{0, nan, 7}, 8, true, "_ @"},
		{[]float64{0, 0}, 8, false, "▁▁"},
		{nil, 8, false, ""},
	} {
		if got := sparkline(tc.vals, tc.width, tc.ascii); got != tc.want {
			t.Errorf("sparkline(%v, %d) = %q, want %q", tc.vals, tc.width, got, tc.want)
		}
	}
}

func TestMergeKeepsHistory(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	pt := func(server string, i int) api.Point {
		return api.Point{Measurement: schema.Server, Time: at.Add(time.Duration(i) * 10 * time.Second),
			Tags: map[string]string{schema.TagServer: server}, Fields: map[string]any{schema.FieldSystemTPS: float64(i)}}
	}
	var old, newer api.Windows
	for i := range api.MaxHistory {
		old.Closed = append(old.Closed, pt("a", i), pt("gone", i))
	}
	// The newer answer repeats the last two windows of a and adds one.
	for i := api.MaxHistory - 2; i <= api.MaxHistory; i++ {
		newer.Closed = append(newer.Closed, pt("a", i))
	}
	got := merge(old, newer).Closed
	if len(got) != api.MaxHistory {
		t.Fatalf("%d windows, want the %d newest of a", len(got), api.MaxHistory)
	}
	for i, p := range got {
		if p.Tags[schema.TagServer] != "a" {
			t.Fatalf("series gone from the daemon kept: %+v", p)
		}
		if v, _ := p.Float(schema.FieldSystemTPS); v != float64(i+1) {
			t.Fatalf("window %d has %v, want %d (oldest first, no repeats)", i, v, i+1)
		}
	}
}

func TestSinceAsksForWhatIsNew(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	m := Model{w: api.Windows{WindowSeconds: 10}, okAt: at}
	for _, tc := range []struct {
		after time.Duration
		want  int
	}{{time.Second, 2}, {25 * time.Second, 4}, {time.Hour, api.MaxHistory}} {
		if got := m.since(at.Add(tc.after)); got != tc.want {
			t.Errorf("%v after the last answer: ask for %d windows, want %d", tc.after, got, tc.want)
		}
	}
	if got := (Model{}).since(at); got != api.MaxHistory {
		t.Errorf("window unknown: ask for %d, want all %d", got, api.MaxHistory)
	}
}
