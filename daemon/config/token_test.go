package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTokenFileMustBeRegular: a token file that is not a regular file (a
// FIFO would block the open for ever, /dev/zero would be read without end)
// is refused at once with an error naming it; a regular one, also through
// a link (Kubernetes mounts secrets so), is read.
func TestTokenFileMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	regular := filepath.Join(dir, "token")
	os.WriteFile(regular, []byte("admin:s3cret\n"), 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(regular, link)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, []byte(strings.Repeat("x", maxTokenBytes+1)), 0o600)
	tests := []struct {
		name, path, want, err string
	}{
		{"regular", regular, "admin:s3cret", ""},
		{"link to a regular file", link, "admin:s3cret", ""},
		{"FIFO", fifo, "", "is a named pipe (FIFO), not a regular file"},
		// Not /dev/zero: read to its end, it would take every byte of memory.
		{"device", "/dev/null", "", "is a character device, not a regular file"},
		{"directory", dir, "", "is a directory, not a regular file"},
		{"too long", big, "", "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{}
			c.Sink.Influx.TokenFile = tc.path
			type result struct {
				tok string
				err error
			}
			done := make(chan result, 1)
			go func() {
				tok, err := c.InfluxToken()
				done <- result{tok, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(5 * time.Second):
				// Give the blocked open its writer, so the goroutine ends.
				if f, err := os.OpenFile(tc.path, os.O_WRONLY, 0); err == nil {
					f.Close()
				}
				<-done
				t.Fatalf("InfluxToken(%s) blocked", tc.path)
			}
			if tc.err == "" {
				if r.err != nil || r.tok != tc.want {
					t.Errorf("token %q, %v; want %q", r.tok, r.err, tc.want)
				}
				return
			}
			if r.err == nil || !strings.Contains(r.err.Error(), tc.err) || !strings.Contains(r.err.Error(), tc.path) ||
				!strings.Contains(r.err.Error(), "sink.influx.token_file") {
				t.Errorf("error %v, want one naming sink.influx.token_file %s: %s", r.err, tc.path, tc.err)
			}
		})
	}
}
