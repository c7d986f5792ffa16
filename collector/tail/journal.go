package tail

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/internal/wake"
)

// Journal reads a systemd unit's journal through `journalctl -o json`,
// which needs neither cgo nor libsystemd at build time (go-systemd's
// sdjournal needs both). Positions are journal cursors.
//
// It polls (journalctl --after-cursor each Poll) instead of following
// with -f: under a unit with ProtectKernelTunables= or
// ProtectControlGroups=, `journalctl -f` was seen to wait forever without
// passing a line (systemd 252), which read as a quiet server. A poll that
// fails is an error with journalctl's own words; one that succeeds is
// proof the journal is readable (Alive).
type Journal struct {
	Unit      string
	StateFile string
	// Resume, when set, is where reading starts instead of StateFile's
	// cursor (Tailer.Resume).
	Resume *Position
	// Command is journalctl's path; "journalctl" when empty.
	Command string
	// Poll is the time between reads; 1s when zero.
	Poll time.Duration
	Log  *slog.Logger
	// Alive is called after every successful read.
	Alive func(time.Time)
	// Flush is told after each read's lines were emitted, before Alive
	// (see Tailer.Flush).
	Flush func()
	// Failed is called with the reason when a read fails, and with nil
	// when reading works again.
	Failed func(error)
}

type journalEntry struct {
	Message  json.RawMessage `json:"MESSAGE"`
	Realtime string          `json:"__REALTIME_TIMESTAMP"`
	Cursor   string          `json:"__CURSOR"`
}

// message decodes MESSAGE, which journald gives as a string, or as an
// array of bytes when it is not valid UTF-8.
func (e journalEntry) message() []byte {
	var s string
	if json.Unmarshal(e.Message, &s) == nil {
		return []byte(s)
	}
	var b []byte
	var ints []int
	if json.Unmarshal(e.Message, &ints) == nil {
		for _, i := range ints {
			b = append(b, byte(i))
		}
	}
	return b
}

// Run reads the journal until ctx ends, from the saved cursor or, the
// first time, from its end.
func (j *Journal) Run(ctx context.Context, emit func(Line)) error {
	if j.Log == nil {
		j.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cmdName := j.Command
	if cmdName == "" {
		cmdName = "journalctl"
	}
	poll := j.Poll
	if poll <= 0 {
		poll = time.Second
	}
	cursor := ""
	if j.Resume != nil {
		cursor = j.Resume.Cursor
	} else if j.StateFile != "" {
		if p, ok, err := LoadPosition(j.StateFile); err == nil && ok {
			cursor = p.Cursor
		}
	}
	var failing string
	t := wake.NewTicker(poll)
	defer t.Stop()
	for {
		last, err := j.read(ctx, cmdName, j.args(cursor), emit)
		if j.Flush != nil {
			j.Flush()
		}
		if last != "" {
			cursor = last
		}
		if ctx.Err() != nil {
			return nil
		}
		failing = j.report(err, failing)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			t.Next()
		}
	}
}

// args are journalctl's arguments to read on after cursor, or, without
// one, to start at the journal's end.
func (j *Journal) args(cursor string) []string {
	args := []string{"-o", "json", "--no-pager", "--show-cursor", "-u", j.Unit}
	if cursor != "" {
		return append(args, "--after-cursor="+cursor)
	}
	return append(args, "-n", "0")
}

// report says when a read's outcome changed: a new error, or readable
// again after failing (the error it last said); it returns the error
// now said, "" when readable.
func (j *Journal) report(err error, failing string) string {
	switch {
	case err != nil && err.Error() != failing:
		failing = err.Error()
		j.Log.Warn("journal unreadable", "unit", j.Unit, "err", err)
		if j.Failed != nil {
			j.Failed(err)
		}
	case err == nil && failing != "":
		failing = ""
		j.Log.Info("journal readable again", "unit", j.Unit)
		if j.Failed != nil {
			j.Failed(nil)
		}
	}
	if err == nil && j.Alive != nil {
		j.Alive(time.Now())
	}
	return failing
}

// journalTimeout bounds one journalctl run: one that never answers (a
// journal it waits on) is an unreadable journal, said so, not a quiet one.
// A run cut short is not lost: the next goes on after the last entry read.
const journalTimeout = 30 * time.Second

// read runs journalctl once and returns the cursor it ended at. It returns
// as soon as ctx ends, even when journalctl left a child holding its
// output open: the pipe is closed under the read.
func (j *Journal) read(ctx context.Context, name string, args []string, emit func(Line)) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, journalTimeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, name, args...)
	cmd.WaitDelay = 100 * time.Millisecond // then stderr's pipe is closed too
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4 << 10}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("journalctl: %w", err)
	}
	stop := context.AfterFunc(rctx, func() { out.Close() })
	defer stop()
	r := bufio.NewReaderSize(out, 64<<10)
	last := ""
	for {
		line, rerr := readBounded(r, 4*MaxLine)
		if c, ok := bytes.CutPrefix(line, []byte("-- cursor: ")); ok {
			last = string(bytes.TrimSpace(c))
		} else if len(line) > 0 {
			var e journalEntry
			if json.Unmarshal(line, &e) == nil && e.Cursor != "" {
				t := time.Now()
				if us, err := strconv.ParseInt(e.Realtime, 10, 64); err == nil {
					t = time.UnixMicro(us)
				}
				msg := e.message()
				if len(msg) > MaxLine {
					msg = msg[:MaxLine]
				}
				last = e.Cursor
				emit(Line{Text: msg, Time: t, Pos: Position{Cursor: e.Cursor}})
			}
		}
		if rerr != nil {
			werr := cmd.Wait()
			if ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
				return last, fmt.Errorf("journalctl -u %s: no answer within %v", j.Unit, journalTimeout)
			}
			msg := strings.TrimSpace(stderr.String())
			// journalctl without the right to read the system journal
			// still exits 0 and shows nothing but this hint.
			if werr == nil && strings.Contains(msg, "not seeing messages from other users and the system") {
				werr = errors.New("exit status 0")
			}
			if werr != nil {
				if msg != "" {
					msg, _, _ = strings.Cut(msg, "\n")
					hint := ""
					if strings.Contains(msg, "permission") || strings.Contains(msg, "not seeing messages") {
						hint = "; the reading user needs the systemd-journal or adm group"
					}
					return last, fmt.Errorf("journalctl -u %s: %s (%v)%s", j.Unit, msg, werr, hint)
				}
				return last, fmt.Errorf("journalctl -u %s: %w", j.Unit, werr)
			}
			if !errors.Is(rerr, io.EOF) {
				return last, fmt.Errorf("journalctl -u %s: %w", j.Unit, rerr)
			}
			return last, nil
		}
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// readBounded reads one line, keeping at most max bytes of it.
func readBounded(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line) < max {
			line = append(line, chunk[:min(len(chunk), max-len(line))]...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}
