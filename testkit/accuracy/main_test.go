package accuracy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/testkit/tokentruth"
	"github.com/tpsmon/tpsmon/testkit/tpsmonbin"
)

// tpsmonBin is the tpsmon binary the tests run: built once, or another
// build's (TPSMON_ACCURACY_BIN) for before/after tables.
func tpsmonBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("TPSMON_ACCURACY_BIN"); bin != "" {
		return bin
	}
	return tpsmonbin.Path(t)
}

// point is one line of tpsmon's JSON output.
type point struct {
	Measurement string            `json:"measurement"`
	Time        time.Time         `json:"time"`
	Tags        map[string]string `json:"tags"`
	Fields      map[string]any    `json:"fields"`
}

func (p point) num(k string) (float64, bool) {
	v, ok := p.Fields[k].(float64)
	return v, ok
}

// replayed runs tpsmon replay with args and returns its server points and
// what it said on stderr.
func replayed(t *testing.T, args ...string) ([]point, string) {
	t.Helper()
	cmd := exec.Command(tpsmonBin(t), append([]string{"replay", "--format", "json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tpsmon replay %v: %v\n%s", args, err, stderr.String())
	}
	var pts []point
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var p point
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("tpsmon replay output %q: %v", sc.Text(), err)
		}
		if p.Measurement == "tpsmon_server" {
			pts = append(pts, p)
		}
	}
	return pts, stderr.String()
}

// windows takes each point's tokens.
func windows(t *testing.T, pts []point) []tokentruth.Window {
	t.Helper()
	var ws []tokentruth.Window
	for _, p := range pts {
		tok, _ := p.num("tokens")
		ws = append(ws, tokentruth.Window{Start: p.Time, Tokens: tok})
	}
	return ws
}

// gunzip writes testdata/name (gzipped) to a temporary file and returns
// its path.
func gunzip(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(name[:len(name)-len(".gz")]))
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, z); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}
