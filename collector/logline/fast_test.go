package logline

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The hand-made readers must say what the library or the plain search
// says, on every input, or they change the numbers.

func checkDecimal(t *testing.T, s string) {
	t.Helper()
	want, err := strconv.ParseFloat(s, 64)
	got, ok := decimal([]byte(s))
	if ok && (err != nil || got != want) {
		t.Fatalf("decimal(%q) = %v, ParseFloat says %v, %v", s, got, want, err)
	}
	// What decimal leaves must be what ParseFloat refuses or a long one.
	if !ok && err == nil && strings.Trim(s, "0123456789.") == "" && strings.Count(s, ".") <= 1 && len(s) <= 15 {
		t.Fatalf("decimal(%q) refused what ParseFloat reads as %v", s, want)
	}
}

func TestDecimalAgreesWithParseFloat(t *testing.T) {
	for _, s := range []string{"0", "0.0", "1.", ".5", ".", "", "1.2.3", "007", "61.2", "1055.3", "5729.20", "16.58",
		"0.1", "0.3", "2.675", "999999999999999", "9999999999999999", "123456789.012345", "0.000000000000001",
		"1234567890123456", "4.35", "1e5", "-1", "1..2"} {
		checkDecimal(t, s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789."
	for range 200_000 {
		b := make([]byte, 1+r.IntN(18))
		for i := range b {
			if r.IntN(8) == 0 {
				b[i] = '.'
			} else {
				b[i] = alphabet[r.IntN(10)]
			}
		}
		checkDecimal(t, string(b))
	}
}

func FuzzDecimal(f *testing.F) {
	for _, s := range []string{"61.2", "0.0", "1.", ".5", "999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(checkDecimal)
}

// identifyByContains is identify as plain substring searches.
func identifyByContains(id *Identity, line []byte) {
	switch {
	case bytes.HasPrefix(line, []byte("time=")) && bytes.Contains(line, ollamaSlog):
		id.Engine = "ollama"
		if i := bytes.Index(line, ollamaModel); i >= 0 {
			if m := ollamaModelName(line[i+len(ollamaModel):]); m != "" {
				id.Model = m
			}
		}
	case bytes.Contains(line, []byte("[GIN] ")):
		id.Engine = "ollama"
	case id.Engine == "" || id.Engine == "llamacpp":
		for _, m := range llamaMarks {
			if bytes.Contains(line, m) {
				id.Engine = "llamacpp"
				break
			}
		}
		if i := bytes.Index(line, []byte(llamaLoading)); i >= 0 && id.Engine == "llamacpp" {
			rest := line[i+len(llamaLoading):]
			if j := bytes.IndexByte(rest, '\''); j > 0 {
				id.Model = strings.TrimSuffix(path.Base(string(rest[:j])), ".gguf")
			}
		}
	}
}

// fixtureLines is every line of the fixture logs.
func fixtureLines(t *testing.T) [][]byte {
	files, _ := filepath.Glob("testdata/*.log")
	files = append(files, filepath.Join("testdata", "ollama_cli_verbose_summary.txt"))
	var lines [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.Split(b, []byte("\n"))...)
	}
	return lines
}

func TestIdentifyAgreesWithContains(t *testing.T) {
	// Lines that name things, with a false start of the text before the
	// real one, then the fixtures (which turn the engine to Ollama).
	var lines [][]byte
	for _, e := range []string{"srv    load_model: loading model '/m/qwen3-8b.gguf'",
		"' ''load_model: loading model 'a/b.gguf'", "llama_model_loader: loaded", "main: server is listening on http://127.0.0.1:8080",
		"G[GIN [GIN] x", "[GIN] 2026/05/19 - 10:13:11 | 200 |"} {
		lines = append(lines, []byte(e))
	}
	lines = append(lines, fixtureLines(t)...)
	named := 0
	for _, start := range []Identity{{}, {Engine: "llamacpp"}} {
		p := &Parser{id: start}
		want := start
		for _, l := range lines {
			p.identify(l)
			identifyByContains(&want, l)
			if p.id != want {
				t.Fatalf("after %q: %+v, by plain search %+v", l, p.id, want)
			}
		}
		if p.id.Model != "" {
			named++
		}
	}
	if named == 0 {
		t.Error("no line named a model: the comparison saw too little")
	}
}

func TestNeedleAnchorsInTexts(t *testing.T) {
	for engine, ns := range needles {
		for _, n := range ns {
			if strings.IndexByte(n.text, n.anchor) < 0 {
				t.Errorf("%s: needle %q has no %q to be found by", engine, n.text, n.anchor)
			}
		}
	}
	for _, a := range []anchored{llamaCancel, llamaPerf, llamaEval, llamaSlotMark, llamaDecoded, llamaGen} {
		if a.off == 0 && len(a.text) > 1 {
			t.Errorf("%q is found by its first byte: its anchor is not in it", a.text)
		}
	}
	if got := indexAnchored([]byte("ab'cd' load_model: loading model 'x'"), llamaLoading, len(llamaLoading)-1); got != 7 {
		t.Errorf("indexAnchored: %d, want 7", got)
	}
}

func TestHasProgressMarkAgreesWithContains(t *testing.T) {
	if llamaDecoded.off != 1 || llamaGen.off != 1 {
		t.Fatalf("hasProgressMark looks one byte before each '_': anchors at %d and %d", llamaDecoded.off, llamaGen.off)
	}
	pieces := []string{llamaDecoded.text, llamaGen.text, "slot print_timing: id", "_", "n_", " = ", "x"}
	lines := fixtureLines(t)
	r := rand.New(rand.NewPCG(5, 6))
	for range 20_000 {
		var b []byte
		for range r.IntN(6) {
			a := pieces[r.IntN(len(pieces))]
			i, j := r.IntN(len(a)+1), r.IntN(len(a)+1)
			b = append(b, a[min(i, j):max(i, j)]...)
		}
		lines = append(lines, b)
	}
	found := 0
	for _, l := range lines {
		want := bytes.Contains(l, []byte(llamaDecoded.text)) || bytes.Contains(l, []byte(llamaGen.text))
		if got := hasProgressMark(l); got != want {
			t.Fatalf("hasProgressMark(%q) = %v, bytes.Contains says %v", l, got, want)
		}
		if want {
			found++
		}
	}
	if found < 100 {
		t.Fatalf("only %d lines hold a mark: the test looks at too few", found)
	}
}

func TestIndexAnchoredAgreesWithIndex(t *testing.T) {
	texts := []anchored{llamaCancel, llamaPerf, llamaEval, llamaSlotMark, llamaDecoded, llamaGen, anchor("ab", 'b'), anchor("aba", 'a')}
	lines := fixtureLines(t)
	r := rand.New(rand.NewPCG(3, 4))
	for range 20_000 {
		// Pieces of the texts glued at random: near misses and overlaps.
		var b []byte
		for range r.IntN(6) {
			a := texts[r.IntN(len(texts))].text
			i, j := r.IntN(len(a)+1), r.IntN(len(a)+1)
			b = append(b, a[min(i, j):max(i, j)]...)
		}
		lines = append(lines, b)
	}
	found := 0
	for _, l := range lines {
		for _, a := range texts {
			got, want := a.in(l), bytes.Index(l, []byte(a.text))
			if got != want {
				t.Fatalf("%q in %q: %d, bytes.Index says %d", a.text, l, got, want)
			}
			if got >= 0 {
				found++
			}
		}
	}
	if found < 100 {
		t.Errorf("only %d texts found: the comparison saw too little", found)
	}
}
