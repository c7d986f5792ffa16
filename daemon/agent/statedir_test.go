package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config/configtest"
	"github.com/tpsmon/tpsmon/internal/statefile"
)

// TestPositionFilesStayInStateDir: a server's name, whatever it holds,
// gives one position file inside the positions directory, which a restart
// finds again; nothing is written beside or above it.
func TestPositionFilesStayInStateDir(t *testing.T) {
	names := []string{"team/llama", "../../../x", "..", "100%", "a\nb", "vllm-8000"}
	base := t.TempDir()
	posDir := filepath.Join(base, "a", "b", "state", "positions")
	if err := os.MkdirAll(posDir, 0o700); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p := testLoop(&pipeline{posDir: posDir, log: slog.New(slog.NewTextHandler(&logs, nil))}, nil, nil)
	for i, n := range names {
		p.logPos[n], p.logDirty[n] = tail.Position{Path: "/var/log/" + fmt.Sprint(i), Offset: int64(100 + i)}, true
	}
	p.savePositions()
	if logs.Len() > 0 {
		t.Errorf("saving logged:\n%s", logs.String())
	}
	for i, n := range names {
		pos, ok, err := tail.LoadPosition(p.positionFile(n))
		if err != nil || !ok || pos.Offset != int64(100+i) {
			t.Errorf("server %q: position %+v, %v, %v; want offset %d", n, pos, ok, err, 100+i)
		}
	}
	var outside []string
	filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if !d.IsDir() && filepath.Dir(path) != posDir {
			outside = append(outside, path)
		}
		return nil
	})
	if len(outside) > 0 {
		t.Errorf("written outside %s: %v", posDir, outside)
	}
	if n, _ := os.ReadDir(posDir); len(n) != len(names) {
		t.Errorf("%d files in the positions directory for %d servers", len(n), len(names))
	}
}

// TestSecondDaemonRefused: a daemon whose state directory another holds
// stops at once with an error naming the directory and the holder's pid.
func TestSecondDaemonRefused(t *testing.T) {
	t.Parallel()
	cfg := configtest.Private(t)
	cfg.GPU.Backend = "none"
	cfg.Sink.Influx.URL = "http://127.0.0.1:9" // never reached
	held, err := statefile.Lock(cfg.Sink.Spool.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// Bounded: without the lock the daemon would run until cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = New(cfg, Options{Log: slog.New(slog.DiscardHandler)}).Run(ctx)
	if !errors.Is(err, statefile.ErrLocked) || !strings.Contains(err.Error(), cfg.Sink.Spool.Dir) ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second daemon: %v, want ErrLocked naming %s and pid %d", err, cfg.Sink.Spool.Dir, os.Getpid())
	}
}
