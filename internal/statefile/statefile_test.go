package statefile

import (
	"errors"
	"fmt"
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
		{"a record's first write through a planted .tmp", "positions.tmp", func(dir string) error {
			r := &Record{Path: filepath.Join(dir, "positions")}
			return r.Write([]byte("{}\n"))
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
	rec := &Record{Path: filepath.Join(dir, "n")}
	for _, v := range []string{"w", "z"} { // the first replaces the file, the second is in place
		if err := rec.Write([]byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"m": "y", "n": "z"} {
		if b, _ := ReadRecord(filepath.Join(dir, name)); string(b) != want {
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
	for name, write := range map[string]func(string, []byte) error{"WriteAtomic": WriteAtomic, "a record's first write": func(path string, b []byte) error {
		return (&Record{Path: path}).Write(b)
	}} {
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

// otherUID is a user that is not this process's: nobody (65534) for root,
// root for anyone else. chownOther gives path to it, or says why it cannot.
func chownOther(t *testing.T, path string) (uid int, ok bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		return 0, false
	}
	if err := os.Lchown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return 65534, true
}

// rootsDir is a directory of root's with mode, for a test not run as
// root: / is 0755, /root usually 0700.
func rootsDir(t *testing.T, mode os.FileMode) string {
	for _, d := range []string{"/", "/root"} {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm() == mode.Perm() && fi.Sys().(*syscall.Stat_t).Uid == 0 {
			return d
		}
	}
	t.Skipf("not root, and neither / nor /root is root's with mode %v", mode.Perm())
	return ""
}

// TestStateDirMustBeOwn: a directory tpsmon's user does not own, or that
// others can write, is refused with an error naming it, its owner and
// mode, and left as it was; tpsmon's own is narrowed to 0700.
func TestStateDirMustBeOwn(t *testing.T) {
	tests := []struct {
		name    string
		mode    os.FileMode // of the directory before EnsureDir
		foreign bool        // owned by another user
		want    string      // in the error; "" : accepted
		after   os.FileMode // its mode after
	}{
		{"own, 0700", 0o700, false, "", 0o700},
		{"own, 0750 as systemd's StateDirectoryMode= makes it", 0o750, false, "", 0o700},
		{"own, 0755", 0o755, false, "", 0o700},
		{"own, group-writable", 0o770, false, "other users can write into it", 0o770},
		{"own, shared like /tmp (1777)", 0o777 | os.ModeSticky, false, "other users can write into it", 0o777 | os.ModeSticky},
		{"another user's, 0700", 0o700, true, "another user owns it", 0o700},
		{"another user's, 0755", 0o755, true, "another user owns it", 0o755},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "spool")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			owner := os.Geteuid()
			if tc.foreign {
				uid, ok := chownOther(t, dir)
				if !ok {
					// Not root: a directory root owns is another user's.
					dir, uid = rootsDir(t, tc.mode), 0
				}
				owner = uid
			}
			err := EnsureDir(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				mode := fmt.Sprintf("mode %04o", uint32(tc.mode.Perm())|map[bool]uint32{true: 0o1000}[tc.mode&os.ModeSticky != 0])
				for _, s := range []string{tc.want, dir, fmt.Sprintf("owner uid %d", owner), mode} {
					if err == nil || !strings.Contains(err.Error(), s) {
						t.Errorf("error %v, want one saying %q", err, s)
					}
				}
				if !errors.Is(err, ErrNotOwn) {
					t.Errorf("error %v is not ErrNotOwn", err)
				}
			}
			fi, _ := os.Stat(dir)
			if got := fi.Mode() & (os.ModePerm | os.ModeSticky); got != tc.after {
				t.Errorf("mode %v after, want %v", got, tc.after)
			}
		})
	}
}

// TestStateSubdirs: a subdirectory (quarantine, positions) is checked as
// the state directory is, and a link in its place is not followed; a link
// above the state directory (DynamicUser='s /var/lib/tpsmon ->
// private/tpsmon) is.
func TestStateSubdirs(t *testing.T) {
	base := t.TempDir()
	state := filepath.Join(base, "state")
	if err := EnsureDir(state); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(base, "elsewhere")
	os.Mkdir(elsewhere, 0o700)
	os.Symlink(elsewhere, filepath.Join(state, "quarantine"))
	if _, err := Dir(state, "quarantine"); !errors.Is(err, ErrLink) {
		t.Errorf("a linked subdirectory: %v, want ErrLink", err)
	}
	open := filepath.Join(state, "positions")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if _, err := Dir(state, "positions"); !errors.Is(err, ErrNotOwn) {
		t.Errorf("a world-writable subdirectory: %v, want ErrNotOwn", err)
	}
	if _, err := Dir(state, "../x"); err == nil {
		t.Error("a subdirectory outside the state directory was accepted")
	}

	private := filepath.Join(base, "private", "tpsmon")
	if err := os.MkdirAll(private, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "tpsmon")
	os.Symlink(filepath.Join("private", "tpsmon"), link)
	if err := EnsureDir(filepath.Join(link, "spool")); err != nil {
		t.Errorf("a state directory below systemd's link: %v", err)
	}
	if fi, err := os.Lstat(filepath.Join(private, "spool")); err != nil || !fi.IsDir() {
		t.Errorf("spool not made in the link's target: %v", err)
	}
}

func TestJoin(t *testing.T) {
	for _, name := range []string{"", ".", "..", "../x", "a/b", "/etc", "a\x00b"} {
		if p, err := Join("/var/lib/tpsmon", name); err == nil {
			t.Errorf("Join(%q) = %s, want an error", name, p)
		}
	}
	for _, name := range []string{"cursor", "..json", "a..b", "%2F"} {
		if p, err := Join("/s", name); err != nil || filepath.Dir(p) != "/s" {
			t.Errorf("Join(%q) = %s, %v", name, p, err)
		}
	}
}

func TestFileName(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct{ name, want string }{
		{"vllm-8000", "vllm-8000"},
		{"llama:8080 (big)", "llama:8080 (big)"},
		{"team/llama", "team%2Fllama"},
		{"../../../x", "%2E.%2F..%2F..%2Fx"},
		{".", "%2E"},
		{"..", "%2E."},
		{"100%", "100%25"},
		{"a\x00b\nc", "a%00b%0Ac"},
		{"modèle", "modèle"},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		got := FileName(tc.name)
		if got != tc.want {
			t.Errorf("FileName(%q) = %q, want %q", tc.name, got, tc.want)
		}
		if _, err := Join("/s", got+".json"); err != nil {
			t.Errorf("FileName(%q): %v", tc.name, err)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q share %q", tc.name, other, got)
		}
		seen[got] = tc.name
	}
	a, b := FileName(long), FileName(long[:299]+"y")
	if a == b || len(a) > maxName || len(b) > maxName || !strings.Contains(a, "%~") {
		t.Errorf("long names: %q (%d bytes) and %q", a, len(a), b)
	}
}

// TestLock: a second lock on one state directory is refused, naming the
// directory and the holder's pid; closing the first frees it.
func TestLock(t *testing.T) {
	dir := t.TempDir()
	first, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(dir)
	pid := fmt.Sprintf("pid %d", os.Getpid())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), pid) {
		t.Errorf("second lock: %v, want ErrLocked naming %s and %s", err, dir, pid)
	}
	first.Close()
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("after the first was closed: %v", err)
	}
	again.Close()
	fifo := filepath.Join(t.TempDir(), LockName)
	syscall.Mkfifo(fifo, 0o600)
	if f, err := Lock(filepath.Dir(fifo)); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO as the lock file: %v", err)
		if f != nil {
			f.Close()
		}
	}
}
