// Package statefile creates and replaces tpsmon's state files (spool
// cursor, window marker, log positions, quarantine) without following
// symbolic links: tpsmon often runs as root, and a link planted in its
// state directory must not make it overwrite or append to another file.
// Its directories must be tpsmon's own (owner, mode; EnsureDir), are kept
// at 0700 and files at 0600, even when they existed before with looser
// modes.
package statefile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLink marks a symbolic link found where tpsmon keeps state.
var ErrLink = errors.New("is a symbolic link; tpsmon does not follow links in its state directory")

// Refused names path when an open with O_NOFOLLOW met a symbolic link.
func Refused(path string, err error) error {
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%s %w", path, ErrLink)
	}
	return err
}

// ErrNotOwn marks a state directory that is not tpsmon's own: owned by
// another user, or writable by others. Files planted there would be taken
// for tpsmon's (a spool segment would be delivered with its credentials).
var ErrNotOwn = errors.New("is not tpsmon's own")

// EnsureDir creates dir (and its parents) with mode 0700, or checks an
// existing one. It must be a directory (not a link to one: links above
// it, such as DynamicUser='s /var/lib/NAME -> private/NAME, are followed),
// owned by this process's effective user and writable by no one else;
// otherwise it is refused (ErrNotOwn, ErrLink) and left as it is. Only a
// directory that passed is narrowed to 0700 (from, say, systemd's
// StateDirectoryMode=0750). The checks are made on the opened directory
// (O_NOFOLLOW, fstat), not on a path a link could be swapped into.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return check(dir, true)
}

// Owned checks dir as EnsureDir does, without creating or narrowing it:
// for a directory tpsmon only reads from (an earlier version's).
func Owned(dir string) error { return check(dir, false) }

func check(dir string, narrow bool) error {
	// O_PATH: the owner and mode of a directory this user cannot read
	// (another's, 0700) are still told.
	fd, err := openDir(dir, oPath)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	mode, euid := st.Mode&0o7777, os.Geteuid()
	switch {
	case int(st.Uid) != euid:
		return fmt.Errorf("state directory: %s (owner uid %d, mode %04o) %w: tpsmon runs as uid %d, another user owns it; "+
			"chown it to tpsmon's user or configure another sink.spool.dir", dir, st.Uid, mode, ErrNotOwn, euid)
	case mode&0o022 != 0:
		return fmt.Errorf("state directory: %s (owner uid %d, mode %04o) %w: other users can write into it; "+
			"configure a directory only tpsmon's user can write", dir, st.Uid, mode, ErrNotOwn)
	case narrow && mode != 0o700:
		if err := narrowDir(dir, &st); err != nil {
			return fmt.Errorf("state directory %s: %w", dir, err)
		}
	}
	return nil
}

// narrowDir sets dir, the directory checked as st, to 0700. An O_PATH
// descriptor cannot be chmod-ed: dir is opened again, and must be the
// same directory.
func narrowDir(dir string, st *syscall.Stat_t) error {
	fd, err := openDir(dir, syscall.O_RDONLY)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var again syscall.Stat_t
	if err := syscall.Fstat(fd, &again); err != nil {
		return err
	}
	if again.Dev != st.Dev || again.Ino != st.Ino {
		return errors.New("replaced while it was checked")
	}
	return syscall.Fchmod(fd, 0o700)
}

// openDir opens dir itself (mode O_RDONLY or oPath), never a link in
// its place.
func openDir(dir string, mode int) (int, error) {
	for {
		fd, err := syscall.Open(dir, mode|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.ELOOP:
			return -1, fmt.Errorf("%s %w", dir, ErrLink)
		case err == syscall.ENOTDIR:
			// Linux says ENOTDIR, not ELOOP, for a link with O_DIRECTORY.
			if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return -1, fmt.Errorf("%s %w", dir, ErrLink)
			}
			return -1, fmt.Errorf("%s is not a directory", dir)
		case err != nil:
			return -1, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		return fd, nil
	}
}

// Join returns the path of name in dir after checking that it is one
// name, directly in dir: not empty, not . or .., without a slash or NUL.
// Names that come from outside (a server's) go through FileName first.
func Join(dir, name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", fmt.Errorf("state file name %q: not one name inside %s", name, dir)
	}
	return filepath.Join(dir, name), nil
}

// maxName is what FileName leaves of NAME_MAX (255) for the suffixes
// callers add (".json.tmp").
const maxName = 255 - 16

// FileName encodes name (a server's, as configured: "team/llama" is one)
// as one file name: '/', '%', control characters and a leading '.' are
// written %XX, everything else is kept, so names that were valid file
// names before keep their files. The encoding is reversible, hence
// without collisions; a name that would be longer than maxName is cut and
// ends in "%~" and a hash of the whole name (a plain encoding never holds
// "%~").
func FileName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '/' || c == '%' || c < 0x20 || c == 0x7f || (i == 0 && c == '.') {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	s := b.String()
	if len(s) <= maxName {
		return s
	}
	sum := sha256.Sum256([]byte(name))
	h := "%~" + hex.EncodeToString(sum[:16])
	return s[:maxName-len(h)] + h
}

// OpenAppend opens path for appending, creating it 0600; a link is
// refused, and an existing file's mode is narrowed to 0600.
func OpenAppend(path string) (*os.File, error) {
	f, err := Open(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := narrow(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func narrow(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	return nil
}

// Open opens path with flag (O_NOFOLLOW and O_CLOEXEC added): a link is
// refused with ErrLink. The file is not registered with the runtime's
// poller as os.OpenFile's are: for a regular file that registration is
// four system calls that fail, at every window's state writes
// (docs/design.md §9).
func Open(path string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := openFD(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openFD is Open's descriptor, without an os.File made around it.
func openFD(path string, flag int, perm fs.FileMode) (int, error) {
	for {
		fd, err := syscall.Open(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, uint32(perm.Perm()))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return -1, Refused(path, &os.PathError{Op: "open", Path: path, Err: err})
		}
		return fd, nil
	}
}

// CreateTemp creates path exclusively (O_EXCL, O_NOFOLLOW) with mode 0600
// for writing: a regular file left there by a crash is removed first, a
// link is refused.
func CreateTemp(path string) (*os.File, error) {
	const flag = os.O_WRONLY | os.O_CREATE | os.O_EXCL
	f, err := Open(path, flag, 0o600)
	if !errors.Is(err, fs.ErrExist) {
		return f, err
	}
	fi, lerr := os.Lstat(path)
	switch {
	case lerr != nil:
		return nil, err
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, fmt.Errorf("%s %w", path, ErrLink)
	case fi.Mode().IsRegular():
		os.Remove(path)
	}
	return Open(path, flag, 0o600)
}

// WriteAtomic replaces path by data: a temporary file beside it, fsync,
// rename. Rename replaces a link at path itself, never its target. A
// reader finds the old or the new data, also after a power loss.
func WriteAtomic(path string, data []byte) error { return write(path, data, true) }

func write(path string, data []byte, durable bool) error {
	tmp := path + ".tmp"
	f, err := CreateTemp(tmp)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	var serr error
	if durable {
		serr = f.Sync()
	}
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Read reads path, refusing a link.
func Read(path string) ([]byte, error) {
	f, err := Open(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Dir returns the path of name in dir after EnsureDir on it.
func Dir(dir, name string) (string, error) {
	p, err := Join(dir, name)
	if err != nil {
		return "", err
	}
	return p, EnsureDir(p)
}

// LockName is the lock file Lock keeps in the state directory.
const LockName = "lock"

// ErrLocked marks a state directory another process holds.
var ErrLocked = errors.New("is in use by another tpsmon")

// Lock takes the state directory dir for this process: an exclusive
// flock on its lock file, which holds the holder's pid. A second daemon
// on the same directory is refused with ErrLocked (and the first one's
// pid) rather than both appending to one spool. Closing the file ends the
// lock, as does the process's exit; the file stays.
func Lock(dir string) (*os.File, error) {
	path, err := Join(dir, LockName)
	if err != nil {
		return nil, err
	}
	f, err := Open(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory lock: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("state directory lock: %s is not a regular file", path)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EWOULDBLOCK {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		holder := strings.TrimSpace(string(b[:n]))
		if holder == "" {
			holder = "unknown"
		}
		return nil, fmt.Errorf("state directory %s %w (pid %s holds %s): one daemon per sink.spool.dir", dir, ErrLocked, holder, path)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("state directory lock %s: %w", path, err)
	}
	pid := strconv.Itoa(os.Getpid()) + "\n"
	if err := errors.Join(f.Truncate(0), writeAt(f, pid)); err != nil {
		f.Close()
		return nil, fmt.Errorf("state directory lock %s: %w", path, err)
	}
	return f, nil
}

func writeAt(f *os.File, s string) error {
	_, err := f.WriteAt([]byte(s), 0)
	return err
}
