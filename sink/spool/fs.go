package spool

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/tpsmon/tpsmon/internal/statefile"
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

// OpenFile opens a file of the real file system, never through a
// symbolic link: one planted in the spool directory is refused with an
// error naming it.
func (OS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := statefile.Open(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Rename renames a file.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove removes a file.
func (OS) Remove(name string) error { return os.Remove(name) }

// replaceFile replaces path by data: a temporary file beside it, fsync
// where durable, rename. These are statefile.WriteAtomic's steps, taken
// through fsys so that tests can fail any of them; a temporary file a
// crash left is overwritten, a link in its place refused (OS opens with
// O_NOFOLLOW).
func replaceFile(fsys FS, path string, data []byte, durable bool) error {
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
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
		fsys.Remove(tmp)
		return err
	}
	return fsys.Rename(tmp, path)
}

// openNoFollow opens a spool file for reading; a symbolic link in its
// place is refused, never followed.
func openNoFollow(path string) (*os.File, error) {
	return statefile.Open(path, os.O_RDONLY, 0)
}

// readFileNoFollow reads a whole spool file, refusing a symbolic link.
func readFileNoFollow(path string) ([]byte, error) { return statefile.Read(path) }
