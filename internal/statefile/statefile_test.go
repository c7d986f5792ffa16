package statefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// plant makes path a link to a victim file and returns the victim's path.
func plant(t *testing.T, path string) string {
	t.Helper()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	return victim
}

func unchanged(t *testing.T, victim string) {
	t.Helper()
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the link's target was written: %q", b)
	}
}

func TestLinksRefused(t *testing.T) {
	tests := []struct {
		name  string
		link  string // relative to the state directory
		write func(dir string) error
	}{
		{"atomic write through a planted .tmp", "last-window.tmp", func(dir string) error {
			return WriteAtomic(filepath.Join(dir, "last-window"), []byte("1\n"))
		}},
		{"atomic write without fsync through a planted .tmp", "cursor.tmp", func(dir string) error {
			return WriteAtomicNoSync(filepath.Join(dir, "cursor"), []byte("1 2\n"))
		}},
		{"append to a planted file", "rejected.lp", func(dir string) error {
			f, err := OpenAppend(filepath.Join(dir, "rejected.lp"))
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"read a planted file", "cursor", func(dir string) error {
			_, err := Read(filepath.Join(dir, "cursor"))
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			victim := plant(t, filepath.Join(dir, tc.link))
			err := tc.write(dir)
			if !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), filepath.Join(dir, tc.link)) {
				t.Errorf("error %v, want one naming %s as a link", err, tc.link)
			}
			unchanged(t, victim)
		})
	}
}

func TestEnsureDir(t *testing.T) {
	base := t.TempDir()
	loose := filepath.Join(base, "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(loose); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(loose); fi.Mode().Perm() != 0o700 {
		t.Errorf("pre-existing directory has mode %v, want 0700", fi.Mode().Perm())
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(loose, link); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(link); !errors.Is(err, ErrLink) || !strings.Contains(err.Error(), link) {
		t.Errorf("a linked directory: %v", err)
	}
	fresh := filepath.Join(base, "a", "b")
	if err := EnsureDir(fresh); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(fresh); fi.Mode().Perm() != 0o700 {
		t.Errorf("new directory has mode %v", fi.Mode().Perm())
	}
}

func TestFilesAre0600(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "q")
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o666)
	f, err := OpenAppend(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := WriteAtomic(filepath.Join(dir, "m"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	// A stale temporary file from a crash does not stop the next write.
	os.WriteFile(filepath.Join(dir, "m.tmp"), []byte("half"), 0o644)
	if err := WriteAtomic(filepath.Join(dir, "m"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "n.tmp"), []byte("half"), 0o644)
	if err := WriteAtomicNoSync(filepath.Join(dir, "n"), []byte("z")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"m": "y", "n": "z"} {
		if b, _ := os.ReadFile(filepath.Join(dir, name)); string(b) != want {
			t.Errorf("%s holds %q, want %q", name, b, want)
		}
		if _, err := os.Lstat(filepath.Join(dir, name+".tmp")); err == nil {
			t.Errorf("%s.tmp left behind", name)
		}
	}
	for _, name := range []string{"q", "m", "n"} {
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
}

// TestTempNotAFile: something other than a regular file in the temporary
// file's place (a FIFO would block an open for writing for ever) is an
// error naming it, for both kinds of write.
func TestTempNotAFile(t *testing.T) {
	for name, write := range map[string]func(string, []byte) error{"WriteAtomic": WriteAtomic, "WriteAtomicNoSync": WriteAtomicNoSync} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			tmp := filepath.Join(dir, "m.tmp")
			if err := syscall.Mkfifo(tmp, 0o600); err != nil {
				t.Fatal(err)
			}
			err := write(filepath.Join(dir, "m"), []byte("x"))
			if err == nil || !strings.Contains(err.Error(), tmp) {
				t.Errorf("error %v, want one naming %s", err, tmp)
			}
			if _, err := os.Lstat(filepath.Join(dir, "m")); err == nil {
				t.Error("m was written")
			}
		})
	}
}
