package tail

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"time"
)

// Journal follows a systemd unit's journal through `journalctl -o json
// -f`, which needs neither cgo nor libsystemd at build time (go-systemd's
// sdjournal needs both). Positions are journal cursors.
type Journal struct {
	Unit      string
	StateFile string
	// Command is journalctl's path; "journalctl" when empty.
	Command string
	Log     *slog.Logger
	Alive   func(time.Time)
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

// Run follows the journal until ctx ends; journalctl is restarted after
// the last cursor if it exits.
func (j *Journal) Run(ctx context.Context, emit func(Line)) error {
	if j.Log == nil {
		j.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cmdName := j.Command
	if cmdName == "" {
		cmdName = "journalctl"
	}
	cursor := ""
	if j.StateFile != "" {
		if p, ok, err := LoadPosition(j.StateFile); err == nil && ok {
			cursor = p.Cursor
		}
	}
	backoff := time.Second
	for ctx.Err() == nil {
		args := []string{"-o", "json", "-f", "--no-pager", "-u", j.Unit}
		if cursor != "" {
			args = append(args, "--after-cursor="+cursor)
		} else {
			args = append(args, "-n", "0")
		}
		last, err := j.follow(ctx, cmdName, args, emit)
		if last != "" {
			cursor, backoff = last, time.Second
		}
		if ctx.Err() != nil {
			return nil
		}
		j.Log.Warn("journal: journalctl stopped; restarting", "unit", j.Unit, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
	return nil
}

func (j *Journal) follow(ctx context.Context, name string, args []string, emit func(Line)) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("journal: %w", err)
	}
	stopAlive := make(chan struct{})
	if j.Alive != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stopAlive:
					return
				case now := <-t.C:
					j.Alive(now)
				}
			}
		}()
	}
	defer close(stopAlive)
	r := bufio.NewReaderSize(out, 64<<10)
	last := ""
	for {
		line, rerr := readBounded(r, 4*MaxLine)
		if len(line) > 0 {
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
			if errors.Is(rerr, io.EOF) {
				rerr = werr
			}
			return last, rerr
		}
	}
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
