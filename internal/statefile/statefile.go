// Package statefile creates and replaces tpsmon's state files (spool
// cursor, window marker, log positions, quarantine) without following
// symbolic links: tpsmon often runs as root, and a link planted in its
// state directory must not make it overwrite or append to another file.
// Directories are kept at 0700 and files at 0600, even when they existed
// before with looser modes.
package statefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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

// EnsureDir creates dir (and its parents) with mode 0700, or checks an
// existing one: it must be a directory, not a link to one, and its mode
// is narrowed to 0700.
func EnsureDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("state directory: %s %w", dir, ErrLink)
	case !fi.IsDir():
		return fmt.Errorf("state directory: %s is not a directory", dir)
	case fi.Mode().Perm() != 0o700:
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
	}
	return nil
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
	for {
		fd, err := syscall.Open(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, uint32(perm.Perm()))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, Refused(path, &os.PathError{Op: "open", Path: path, Err: err})
		}
		return os.NewFile(uintptr(fd), path), nil
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

// WriteAtomicNoSync is WriteAtomic without the fsync: a reader finds the
// old or the new data whenever the process ends, but after a power loss
// the file may be older than the last write, or empty. For state whose
// reader takes an older value as a cost, not a wrong number: the window
// marker, the spool's cursor (docs/design.md §2).
func WriteAtomicNoSync(path string, data []byte) error { return write(path, data, false) }

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

// Dir returns filepath.Join(dir, name) after EnsureDir on it.
func Dir(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	return p, EnsureDir(p)
}
