package statefile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/cpuclock"
)

// TestRecord: a Record reads back its last write, in place, through
// restarts, torn slots, plain files of older versions and data too long
// for a slot.
func TestRecord(t *testing.T) {
	long := strings.Repeat("p", recordSlot)
	for _, tc := range []struct {
		name   string
		before string // the file's content before the first write; "" none
		writes []string
		tear   func(b []byte, lastSlot int) // damages the file after the writes
		want   string
		err    error
	}{
		{name: "new file", writes: []string{"a"}, want: "a"},
		{name: "many writes", writes: []string{"1", "22", "333", "4", "55555"}, want: "55555"},
		{name: "an older version's plain file", before: `{"offset":7}` + "\n", writes: nil, want: `{"offset":7}` + "\n"},
		{name: "plain file rewritten", before: `{"offset":7}` + "\n", writes: []string{"x", "y"}, want: "y"},
		{name: "newest slot torn", writes: []string{"1", "2", "3"}, want: "2",
			tear: func(b []byte, last int) { b[last*recordSlot+len(recordMagic)+5] ^= 0xff }},
		{name: "newest slot's data torn", writes: []string{"first", "second"}, want: "first",
			tear: func(b []byte, last int) { b[len(b)-1] ^= 0xff }},
		{name: "every slot torn", writes: []string{"1", "2"}, err: ErrTorn,
			tear: func(b []byte, last int) { b[3] ^= 0xff; b[recordSlot+len(recordMagic)] = 'x' }},
		{name: "longer than a slot", writes: []string{"a", long}, want: long},
		{name: "back into slots", writes: []string{"a", long, "b", "c"}, want: "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rec")
			if tc.before != "" {
				os.WriteFile(path, []byte(tc.before), 0o600)
			}
			r := &Record{Path: path, Durable: true}
			for _, w := range tc.writes {
				if err := r.Write([]byte(w)); err != nil {
					t.Fatal(err)
				}
				if got, err := ReadRecord(path); err != nil || string(got) != w {
					t.Fatalf("after writing %.20q read %.20q, %v", w, got, err)
				}
			}
			if fi, err := os.Stat(path); err == nil && fi.Size() > 2*recordSlot && len(tc.writes) > 0 && len(tc.writes[len(tc.writes)-1]) < recordSlot {
				t.Errorf("file of %d bytes: more than two slots", fi.Size())
			}
			if tc.tear != nil {
				b, _ := os.ReadFile(path)
				tc.tear(b, (len(tc.writes)+1)%2)
				os.WriteFile(path, b, 0o600)
			}
			got, err := ReadRecord(path)
			if !errors.Is(err, tc.err) || err == nil && string(got) != tc.want {
				t.Fatalf("read %.20q, %v; want %.20q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestRecordRestarts: a Record of a new process (sequence unknown)
// replaces the file whole at its first write and goes on in place.
func TestRecordRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec")
	for run := range 3 {
		r := &Record{Path: path}
		for i := range 5 {
			v := fmt.Sprintf("run %d write %d", run, i)
			if err := r.Write([]byte(v)); err != nil {
				t.Fatal(err)
			}
			if got, err := ReadRecord(path); err != nil || string(got) != v {
				t.Fatalf("read %q, %v; want %q", got, err, v)
			}
		}
	}
}

// TestRecordRefusesLink: a link planted where a record is rewritten in
// place is refused, its target untouched.
func TestRecordRefusesLink(t *testing.T) {
	dir := t.TempDir()
	path, target := filepath.Join(dir, "rec"), filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o600)
	r := &Record{Path: path}
	if err := r.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := r.Write([]byte("b")); !errors.Is(err, ErrLink) {
		t.Errorf("write through a link: %v, want %v", err, ErrLink)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the link's target holds %q", b)
	}
}

// TestRecordFIFO: a FIFO planted where a record is rewritten in place is
// an error at once, not a write that waits for a reader.
func TestRecordFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec")
	r := &Record{Path: path}
	if err := r.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Write([]byte("b")) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a write into a FIFO with no reader succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write into a FIFO still waits after 10 s")
	}
}

// BenchmarkRecordDurable is a log position saved as the daemon saves it
// at every window: a slot rewritten in place and synced. CPU time beside
// wall time: a sync mostly waits.
func BenchmarkRecordDurable(b *testing.B) {
	r := &Record{Path: filepath.Join(b.TempDir(), "pos.json"), Durable: true}
	data := []byte(`{"path":"/var/log/vllm/server.log","dev":2049,"ino":1234567,"offset":123456789,"head":"0123456789abcdef"}`)
	if err := r.Write(data); err != nil {
		b.Fatal(err)
	}
	start := cpuclock.Self()
	for b.Loop() {
		if err := r.Write(data); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuclock.Self()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
