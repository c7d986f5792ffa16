package logging

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

func TestJournalHandlerFields(t *testing.T) {
	type sent struct {
		msg  string
		pri  journal.Priority
		vars map[string]string
	}
	var got []sent
	h := &journalHandler{level: slog.LevelInfo, fallback: io.Discard,
		send: func(msg string, pri journal.Priority, vars map[string]string) error {
			got = append(got, sent{msg, pri, vars})
			return nil
		}}
	log := slog.New(h).With("server", "llama-70b")
	log.Debug("hidden")
	log.Warn("server unreadable", "gpu", 3, "err", "connection refused")
	if len(got) != 1 {
		t.Fatalf("sent %d records, want 1 (debug is below the level)", len(got))
	}
	g := got[0]
	if g.pri != journal.PriWarning || g.vars["SERVER"] != "llama-70b" || g.vars["GPU"] != "3" || g.vars["ERR"] != "connection refused" {
		t.Errorf("journal record %+v", g)
	}
	if g.msg != `server unreadable server=llama-70b gpu=3 err="connection refused"` {
		t.Errorf("message %q", g.msg)
	}
}

// TestLogsMaskCredentials: whatever attribute carries a URL with a
// password, a string or an error, the log shows it masked.
func TestLogsMaskCredentials(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: MaskAttr}))
	log.Info("tpsmon started", "influx", "http://admin:hunter2@db:8086")
	log.Warn("influx write failed", "err", errors.New(`Post "https://u:hunter2@db:8086/api/v2/write": EOF`))
	if strings.Contains(buf.String(), "hunter2") || strings.Count(buf.String(), ":xxxxx@") != 2 {
		t.Errorf("log:\n%s", buf.String())
	}
	// A token in the query string, as net/http's error quotes it.
	buf.Reset()
	uerr := &url.Error{Op: "Get", URL: "http://127.0.0.1:8000/metrics?token=hunter2&x=1", Err: errors.New("connection refused")}
	log.Warn("server unreadable", "err", fmt.Errorf("scrape s: %w", uerr), "url", "http://h/m?API_KEY=hunter2")
	if strings.Contains(buf.String(), "hunter2") || !strings.Contains(buf.String(), "metrics?token=xxxxx&x=1") ||
		!strings.Contains(buf.String(), "API_KEY=xxxxx") {
		t.Errorf("log:\n%s", buf.String())
	}
}
