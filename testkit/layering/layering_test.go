// Package layering holds the test that keeps tpsmon's packages in their
// layers (docs/design.md, "Layers"): no package imports one that stands
// above it.
package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/tpsmon/tpsmon"

// layers ranks tpsmon's packages by path, lowest first; a package may
// import those of its own layer and below. The longest matching prefix
// decides (collector/engine is a leaf, collector above it).
var layers = []struct {
	name     string
	prefixes []string
}{
	{"leaves", []string{"schema", "sample", "collector/engine", "internal/"}},
	{"sources", []string{"collector", "collector/", "nvml", "sink/spool"}},
	{"joiner", []string{"window"}},
	{"analysis", []string{"analysis", "analysis/"}},
	{"outputs", []string{"sink", "sink/otlp", "report", "rollup"}},
	{"simulators and test support", []string{"sim/", "testkit/"}},
	{"daemon", []string{"daemon/"}},
	{"commands", []string{"cmd/", "bench", "bench/"}},
}

// layerOf returns the rank of a tpsmon package path (relative to the
// module), and false for one no layer names.
func layerOf(rel string) (int, bool) {
	best, rank := -1, 0
	for i, l := range layers {
		for _, p := range l.prefixes {
			match := rel == p || strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p)
			if match && len(p) > best {
				best, rank = len(p), i
			}
		}
	}
	return rank, best >= 0
}

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string // of its non-test files
}

// violations says, one edge each, which imports climb a layer or reach
// test support from code that is not a test.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		from, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue
		}
		fr, known := layerOf(from)
		if !known {
			out = append(out, fmt.Sprintf("%s: in no layer; add it to the layering (here and in docs/design.md)", from))
			continue
		}
		for _, imp := range p.Imports {
			to, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			tr, known := layerOf(to)
			switch {
			case !known:
				out = append(out, fmt.Sprintf("%s imports %s, which is in no layer", from, to))
			case strings.HasPrefix(to, "testkit/") && !strings.HasPrefix(from, "testkit/"):
				out = append(out, fmt.Sprintf("%s imports %s: only tests may use test support", from, to))
			case tr > fr:
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s), a layer above it", from, layers[fr].name, to, layers[tr].name))
			}
		}
	}
	return out
}

// goList runs go list with args in the module's root and decodes its
// stream of JSON objects.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=ImportPath,Imports,Error"}, args...)...)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.Bytes())
	}
	var out []pkg
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p struct {
			pkg
			Error *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		out = append(out, p.pkg)
	}
	if len(out) == 0 {
		t.Fatal("go list listed no package")
	}
	return out
}

// TestLayering: no package of the module imports one above its layer, and
// no code but tests imports test support.
func TestLayering(t *testing.T) {
	pkgs := goList(t, "./...")
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
	t.Logf("%d packages checked", len(pkgs))
}

// TestJoinerDependsOnNoHTTP: the joiner and the analysis stage build
// without the scraper's HTTP client, expfmt or protobuf.
func TestJoinerDependsOnNoHTTP(t *testing.T) {
	heavy := regexp.MustCompile(`net/http|expfmt|protobuf`)
	for _, p := range []string{"./window", "./analysis", "./sample"} {
		var bad []string
		for _, d := range goList(t, "-deps", p) {
			if heavy.MatchString(d.ImportPath) {
				bad = append(bad, d.ImportPath)
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s depends on %d such packages: %s", p, len(bad), strings.Join(bad, ", "))
		}
	}
}

// TestViolations checks the checker on edges of each kind.
func TestViolations(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	tests := []struct {
		from, to string
		bad      bool
	}{
		{"window", "sample", false},
		{"window", "collector/engine", false},
		{"window", "collector", false}, // a layer below; TestJoinerDependsOnNoHTTP keeps the scraper out
		{"collector/engine", "collector", true},
		{"collector", "collector/engine", false},
		{"collector/logline", "collector/tail", false},
		{"sample", "schema", false},
		{"sink/spool", "sink", true},
		{"sink", "sink/spool", false},
		{"analysis", "window", false},
		{"window", "analysis", true},
		{"sink", "analysis", false},
		{"rollup", "report", false},
		{"daemon/agent", "sim/gpusim", false},
		{"sim/gpusim", "daemon/agent", true},
		{"testkit/influxtest", "testkit/loopback", false},
		{"testkit/configtest", "daemon/config", true},
		{"daemon/agent", "testkit/loopback", true},
		{"sim/fleetsim", "testkit/loopback", true},
		{"cmd/tpsmon", "daemon/agent", false},
		{"internal/heapgoal", "internal/wake", false},
		{"internal/wake", "window", true},
		{"newthing", "schema", true},
		{"schema", "newthing", true},
	}
	for _, tt := range tests {
		got := violations([]pkg{{ImportPath: m(tt.from), Imports: []string{m(tt.to), "fmt", "github.com/other/x"}}})
		if bad := len(got) > 0; bad != tt.bad {
			t.Errorf("%s -> %s: violations %q, want bad %v", tt.from, tt.to, got, tt.bad)
		}
	}
}
