package spool

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// FS is the part of the file system the spool writes through, so that
// tests can inject a full disk or a failing device.
type FS interface {
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
}

// File is an open spool file.
type File interface {
	io.ReadWriteCloser
	io.Seeker
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
}

// OS is the real file system.
type OS struct{}

// OpenFile opens a file of the real file system.
func (OS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, flag, perm)
}

// Rename renames a file.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove removes a file.
func (OS) Remove(name string) error { return os.Remove(name) }

// openNoFollow opens a spool file for reading; a symbolic link in its
// place is refused, never followed.
func openNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, refusedLink(path, err)
	}
	return f, nil
}

// readFileNoFollow reads a whole spool file, refusing a symbolic link.
func readFileNoFollow(path string) ([]byte, error) {
	f, err := openNoFollow(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// refusedLink names the path when an O_NOFOLLOW open met a symbolic link.
func refusedLink(path string, err error) error {
	if errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%s is a symbolic link; tpsmon does not follow links in its state directory", path)
	}
	return err
}
