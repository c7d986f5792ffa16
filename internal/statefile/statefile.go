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
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, Refused(path, err)
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

// CreateTemp creates path exclusively (O_EXCL, O_NOFOLLOW) with mode 0600
// for writing: a regular file left there by a crash is removed first, a
// link is refused.
func CreateTemp(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s %w", path, ErrLink)
		}
		if fi.Mode().IsRegular() {
			os.Remove(path)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, Refused(path, err)
	}
	return f, nil
}

// WriteAtomic replaces path by data: a temporary file beside it, fsync,
// rename. Rename replaces a link at path itself, never its target.
func WriteAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := CreateTemp(tmp)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
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
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, Refused(path, err)
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Dir returns filepath.Join(dir, name) after EnsureDir on it.
func Dir(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	return p, EnsureDir(p)
}
