// Package logging builds tpsmon's logger: to the journal with a field per
// attribute under systemd, as text otherwise, with credentials in URLs
// masked either way, at a level a reload can change.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/coreos/go-systemd/v22/journal"

	"github.com/tpsmon/tpsmon/internal/redact"
)

// New logs to the journal, with structured fields, when stderr is
// connected to it (systemd sets JOURNAL_STREAM); as text to stderr
// otherwise. The level can change at run time (reload).
func New(level string) (*slog.Logger, *slog.LevelVar) {
	lv := new(slog.LevelVar)
	lv.Set(ParseLevel(level))
	if ok, _ := journal.StderrIsJournalStream(); ok && journal.Enabled() {
		return slog.New(&journalHandler{level: lv, send: journal.Send, fallback: os.Stderr}), lv
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv, ReplaceAttr: MaskAttr})), lv
}

// MaskAttr masks credentials in URLs whatever attribute carries them: a
// URL, an error that quotes one.
func MaskAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(redact.Text(a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(redact.Text(err.Error()))
		}
	}
	return a
}

// ParseLevel reads debug, info, warn or error; anything else is info.
func ParseLevel(s string) slog.Level {
	var l slog.Level
	_ = l.UnmarshalText([]byte(strings.ToUpper(s)))
	return l
}

// journalHandler sends records to journald natively: the message with its
// attributes appended (as journalctl shows it), and each attribute as a
// field of its own (SERVER=, GPU=, ERR=), so `journalctl -u tpsmon
// SERVER=llama-70b` filters.
type journalHandler struct {
	level    slog.Leveler
	attrs    []slog.Attr
	group    string
	send     func(msg string, pri journal.Priority, vars map[string]string) error
	fallback io.Writer
}

func (h *journalHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *journalHandler) Handle(_ context.Context, r slog.Record) error {
	var msg strings.Builder
	msg.WriteString(r.Message)
	vars := map[string]string{"SYSLOG_IDENTIFIER": "tpsmon"}
	add := func(a slog.Attr) {
		key := a.Key
		if h.group != "" {
			key = h.group + "." + key
		}
		v := redact.Text(a.Value.Resolve().String())
		fmt.Fprintf(&msg, " %s=%s", key, quoteIfNeeded(v))
		vars[fieldName(key)] = v
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	if err := h.send(redact.Text(msg.String()), priority(r.Level), vars); err != nil {
		fmt.Fprintf(h.fallback, "<%d>%s\n", priority(r.Level), msg.String())
	}
	return nil
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

func priority(l slog.Level) journal.Priority {
	switch {
	case l >= slog.LevelError:
		return journal.PriErr
	case l >= slog.LevelWarn:
		return journal.PriWarning
	case l >= slog.LevelInfo:
		return journal.PriInfo
	}
	return journal.PriDebug
}

// fieldName makes a journal field name: upper case letters, digits and
// underscores, not starting with an underscore or a digit.
func fieldName(key string) string {
	b := []byte(strings.ToUpper(key))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	s := strings.TrimLeft(string(b), "_0123456789")
	if s == "" {
		return "ATTR"
	}
	return s
}

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// Quiet discards everything but errors.
func Quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
