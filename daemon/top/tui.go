package top

import (
	"context"
	"fmt"
	"io"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/tpsmon/tpsmon/daemon/api"
)

// Config is what `tpsmon top` was asked.
type Config struct {
	Client *Client
	// Every is how often the daemon is asked; windows closing and the
	// open window's values show within it.
	Every time.Duration
	// ASCII draws sparklines without block characters.
	ASCII bool
	// Floor is the per-user tokens/s objective of the operating point
	// lines (0: 20).
	Floor float64
}

// fetched is the answer to one fetch.
type fetched struct {
	w   api.Windows
	err error
	at  time.Time
}

// Model is the bubbletea model of the live view.
type Model struct {
	cfg    Config
	ctx    context.Context
	styles Styles
	w      api.Windows
	have   bool
	err    error
	errAt  time.Time // when the daemon stopped answering
	// okAt and lastAt are when the last good answer and the last try
	// came: while the daemon is gone, its clock is moved on by the gap.
	okAt, lastAt time.Time
	width        int
	height       int
	sortKey      SortKey
	filter       bool
}

// NewModel returns the live view's model, first showing w.
func NewModel(ctx context.Context, cfg Config, w api.Windows, styles Styles) Model {
	now := time.Now()
	return Model{cfg: cfg, ctx: ctx, styles: styles, w: w, have: true, width: 120, height: 40, okAt: now, lastAt: now}
}

func (m Model) fetch(after time.Duration) tea.Cmd {
	return tea.Tick(after, func(time.Time) tea.Msg {
		ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
		defer cancel()
		w, err := m.cfg.Client.Windows(ctx, m.since(time.Now()))
		return fetched{w: w, err: err, at: time.Now()}
	})
}

// since is how many windows to ask for: those closed since the last good
// answer and two more. The history is kept here (merge), so a poll does
// not have the daemon encode all of it each second.
func (m Model) since(now time.Time) int {
	win := time.Duration(m.w.WindowSeconds * float64(time.Second))
	if win <= 0 {
		return api.MaxHistory
	}
	return min(int(now.Sub(m.okAt)/win)+2, api.MaxHistory)
}

// Init starts the polling.
func (m Model) Init() tea.Cmd { return m.fetch(m.cfg.Every) }

// Update handles keys, resizes and answers.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		keys := []string{msg.String()}
		if msg.Type == tea.KeyRunes {
			// Keys typed faster than they are read come as one message.
			keys = keys[:0]
			for _, r := range msg.Runes {
				keys = append(keys, string(r))
			}
		}
		for _, k := range keys {
			switch k {
			case "q", "ctrl+c", "esc":
				return m, tea.Quit
			case "s":
				m.sortKey = (m.sortKey + 1) % numSortKeys
			case "f":
				m.filter = !m.filter
			}
		}
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case fetched:
		m.lastAt = msg.at
		if msg.err != nil {
			if m.err == nil {
				m.errAt = msg.at
			}
			m.err = msg.err
		} else {
			m.w, m.have, m.err, m.okAt = merge(m.w, msg.w), true, nil, msg.at
		}
		return m, m.fetch(m.cfg.Every)
	}
	return m, nil
}

// View draws the screen.
func (m Model) View() string {
	status := ""
	if m.err != nil {
		status = fmt.Sprintf("daemon not answering since %s, retrying every %s; showing its last data: %v",
			m.errAt.Format("15:04:05"), m.cfg.Every, m.err)
	}
	w := m.w
	if m.err != nil {
		w.Now = w.Now.Add(m.lastAt.Sub(m.okAt))
	}
	return Render(w, Options{Width: m.width, Height: m.height, Sort: m.sortKey, Filter: m.filter,
		ASCII: m.cfg.ASCII, Status: status, Styles: m.styles, Keys: true, Floor: m.cfg.Floor})
}

// Run shows the live view on the terminal of in and out until q or ctx
// ends. The first fetch must succeed: nothing to show otherwise.
func Run(ctx context.Context, cfg Config, in io.Reader, out io.Writer) error {
	w, err := first(ctx, cfg)
	if err != nil {
		return err
	}
	m := NewModel(ctx, cfg, w, NewStyles(lipgloss.DefaultRenderer()))
	p := tea.NewProgram(m, tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out), tea.WithAltScreen())
	if _, err := p.Run(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("terminal: %w", err)
	}
	return nil
}

// Once writes one plain snapshot, width columns wide.
func Once(ctx context.Context, cfg Config, out io.Writer, width int) error {
	w, err := first(ctx, cfg)
	if err != nil {
		return err
	}
	plain := lipgloss.NewRenderer(io.Discard)
	_, err = fmt.Fprintln(out, Render(w, Options{Width: width, ASCII: cfg.ASCII, Styles: NewStyles(plain), Floor: cfg.Floor}))
	return err
}

func first(ctx context.Context, cfg Config) (api.Windows, error) {
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w, err := cfg.Client.Windows(fctx, api.MaxHistory)
	if err != nil {
		return w, explained{msg: Explain(err, cfg.Client.Addr()), err: err}
	}
	return w, nil
}

// explained is an error told in the user's terms; errors.Is still sees
// the cause.
type explained struct {
	msg string
	err error
}

func (e explained) Error() string { return e.msg }
func (e explained) Unwrap() error { return e.err }
