package tail

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestJournalFollowsAndResumes(t *testing.T) {
	state := filepath.Join(t.TempDir(), "pos.json")
	cmd, _ := filepath.Abs("testdata/fake-journalctl")
	// Run stops once n lines came, or at a deadline far past what a
	// loaded machine takes (a fixed half second lost all three under -race).
	run := func(n int) []Line {
		var got []Line
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		j := &Journal{Unit: "vllm.service", StateFile: state, Command: cmd}
		j.Run(ctx, func(l Line) {
			if got = append(got, l); len(got) == n {
				cancel()
			}
		})
		return got
	}
	got := run(3)
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3", len(got))
	}
	if !got[0].Time.Equal(time.UnixMicro(1764417610000000)) || string(got[1].Text) != "hi\xff" || got[2].Pos.Cursor != "s=1;i=3" {
		t.Errorf("lines %+v", got)
	}
	// The consumer accepted the first two; a restart resumes after them.
	if err := NewPositionFile(state).Save(got[1].Pos); err != nil {
		t.Fatal(err)
	}
	again := run(1)
	if len(again) == 0 || string(again[0].Text) != "plain line" {
		t.Errorf("after resuming: %+v", again)
	}
}

func TestJournalUnreadableIsAnErrorWithJournalctlsWords(t *testing.T) {
	cmd, _ := filepath.Abs("testdata/fake-journalctl-denied")
	var reasons []error
	alive := 0
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	j := &Journal{Unit: "vllm.service", Command: cmd, Poll: 50 * time.Millisecond,
		Alive: func(time.Time) { alive++ }, Failed: func(err error) { reasons = append(reasons, err) }}
	j.Run(ctx, func(Line) { t.Error("a line from a journal that cannot be read") })
	if alive != 0 {
		t.Errorf("Alive called %d times for an unreadable journal", alive)
	}
	// Said once, however many polls fail.
	if len(reasons) != 1 || reasons[0] == nil {
		t.Fatalf("reasons %v, want one", reasons)
	}
	for _, want := range []string{"vllm.service", "insufficient permissions", "systemd-journal"} {
		if !strings.Contains(reasons[0].Error(), want) {
			t.Errorf("reason %q lacks %q", reasons[0], want)
		}
	}
}

// TestJournalStopsWhenJournalctlNeverAnswers: a journalctl that never
// answers, whose child keeps its pipes open once it is killed, does not
// hold Run past its cancel.
func TestJournalStopsWhenJournalctlNeverAnswers(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	t.Setenv("TPSMON_TEST_PIDS", pids)
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, l := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(l); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	cmd, _ := filepath.Abs("testdata/fake-journalctl-mute")
	ctx, cancel := context.WithCancel(context.Background())
	j := &Journal{Unit: "vllm.service", Command: cmd}
	done := make(chan struct{})
	go func() { j.Run(ctx, func(Line) {}); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(pids); len(b) > 0 {
			break // journalctl runs, and its child holds the pipes
		}
		if time.Now().After(deadline) {
			t.Fatal("the fake journalctl did not start")
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running 5 s after cancel")
	}
}
