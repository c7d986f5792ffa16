package sink

import (
	"fmt"
	"io"
	"os"
)

// File appends line protocol to a file, or to stdout for path "-".
type File struct {
	w     io.Writer
	close func() error
}

// OpenFile opens path for appending ("-" = stdout).
func OpenFile(path string) (*File, error) {
	if path == "-" || path == "" {
		return &File{w: os.Stdout, close: func() error { return nil }}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("file sink: %w", err)
	}
	return &File{w: f, close: f.Close}, nil
}

// Write writes encoded lines.
func (f *File) Write(lines []byte) (int, error) {
	n, err := f.w.Write(lines)
	if err != nil {
		return n, fmt.Errorf("file sink: %w", err)
	}
	return n, nil
}

// Close closes the file.
func (f *File) Close() error { return f.close() }
