package tail

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestJournalFollowsAndResumes(t *testing.T) {
	state := filepath.Join(t.TempDir(), "pos.json")
	cmd, _ := filepath.Abs("testdata/fake-journalctl")
	run := func() []Line {
		var got []Line
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		j := &Journal{Unit: "vllm.service", StateFile: state, Command: cmd}
		j.Run(ctx, func(l Line) { got = append(got, l) })
		return got
	}
	got := run()
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3", len(got))
	}
	if !got[0].Time.Equal(time.UnixMicro(1764417610000000)) || string(got[1].Text) != "hi\xff" || got[2].Pos.Cursor != "s=1;i=3" {
		t.Errorf("lines %+v", got)
	}
	// The consumer accepted the first two; a restart resumes after them.
	if err := SavePosition(state, got[1].Pos); err != nil {
		t.Fatal(err)
	}
	again := run()
	if len(again) == 0 || string(again[0].Text) != "plain line" {
		t.Errorf("after resuming: %+v", again)
	}
}
