package spool

import (
	"io"
	"io/fs"
	"os"
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
