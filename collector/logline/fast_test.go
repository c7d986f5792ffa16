package logline

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
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
		if m := regexp.MustCompile(`msg="Listening on .*?\(version ([^ \t)'"]*[0-9][^ \t)'"]*)`).FindSubmatch(line); m != nil && len(m[1]) <= 64 {
			id.Version = string(m[1])
		}
	case bytes.Contains(line, []byte("[GIN] ")):
		id.Engine = "ollama"
	case id.Engine == "" && bytes.Contains(line, []byte("vLLM API server version ")):
		id.Engine = "vllm"
		id.Version = ""
		if m := regexp.MustCompile(`vLLM API server version ([^ \t)'"]*)`).FindSubmatch(line); m != nil && len(m[1]) <= 64 && bytes.ContainsAny(m[1], "0123456789") {
			id.Version = string(m[1])
		}
	case id.Engine == "" || id.Engine == "llamacpp":
		if m := regexp.MustCompile(`build: ([0-9]{1,9}) \(([0-9a-f]{1,40})\)`).FindSubmatch(line); m != nil && bytes.Index(line, []byte("build: ")) == bytes.Index(line, m[0]) {
			id.Version = "b" + string(m[1]) + "-" + string(m[2])
		}
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
	for _, e := range []string{"build: 4567 (abc1234) with cc (GCC) 12.2.0 for x86_64-linux-gnu", "build: x (abc)", "build: 12 (xyz)",
		"srv    load_model: loading model '/m/qwen3-8b.gguf'",
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

// TestLlamaFastAgreesWithGeneralPath feeds the fixtures, and llama.cpp
// timing lines broken in many ways, through two parsers: one reads
// llama.cpp's lines by hand where it can, the other only by the general
// path. Every record, and every count and memory of the parsers, must
// agree line by line.
func TestLlamaFastAgreesWithGeneralPath(t *testing.T) {
	// Figures before any header first: no request to give them to.
	lines := [][]byte{[]byte("       eval time =     319.58 ms /    10 tokens (   31.96 ms per token,    31.29 tokens per second)")}
	lines = append(lines, fixtureLines(t)...)
	var timing [][]byte
	for _, l := range lines {
		if bytes.Contains(l, []byte("eval time")) {
			timing = append(timing, l)
		}
	}
	timing = append(timing,
		[]byte("2026-05-19T10:00:00.020000001Z slot print_timing: id  1 | task 1 |        eval time =    5729.20 ms /    96 tokens (   60.31 ms per token,    16.58 tokens per second)"),
		[]byte("slot print_timing: id  1 | task -1 | prompt eval time = 1.5 ms / 3 runs (0.5 ms per token, 2000.0 tokens per second)  \r"))
	pieces := []string{"a", "{", `"`, "=", "|", " ", "-", ".", "9", "0", "\r", "\t", ")", "(", "_", "\x1b[0m", "prompt ", "eval time = ",
		"slot print_timing: id 3 | task 9 |", "slot print_timing: id", "n_decoded = 5, tg = 3.0 t/s", "stop: cancel task, id_task = 4",
		" tokens per second)", "llama_perf_", `"print_timings"`, "Avg generation throughput", "Decode batch", "time_per_token=", "iter = ",
		"] Avg ", "1e5", "99999999999999999999", "NaN", "\xff"}
	r := rand.New(rand.NewPCG(7, 8))
	for range 60_000 {
		b := bytes.Clone(timing[r.IntN(len(timing))])
		for range r.IntN(4) {
			i := r.IntN(len(b) + 1)
			switch r.IntN(4) {
			case 0: // a byte replaced or a piece put in
				piece := pieces[r.IntN(len(pieces))]
				if i < len(b) && len(piece) == 1 {
					b[i] = piece[0]
				} else {
					b = append(b[:i], append([]byte(piece), b[i:]...)...)
				}
			case 1:
				b = b[:i]
			case 2:
				j := min(len(b), i+r.IntN(12))
				b = append(b[:i], b[j:]...)
			default: // a timestamp or a level before it
				b = append([]byte([]string{"0.36.717.345 I ", "2026-05-19T10:00:00Z ", "[GIN] ", "E ", "time=x "}[r.IntN(5)]), b...)
			}
		}
		lines = append(lines, b)
		if r.IntN(50) == 0 {
			lines = append(lines, []byte("slot print_timing: id  2 | task 41 | "), []byte("srv  stop: all tasks")) // headers, and a line that is none
		}
	}
	for _, name := range []string{"", "llamacpp", "ollama"} {
		fast, err := NewParser(name)
		if err != nil {
			t.Fatal(err)
		}
		general, _ := NewParser(name)
		general.noLlamaFast = true
		for _, p := range []*Parser{fast, general} {
			p.Year, p.Timestamps = 2026, true
		}
		matched, read := 0, 0
		for _, l := range lines {
			if _, _, m := (&Parser{}).llamaFast(l); m {
				matched++
			}
			got, gotOK := fast.Parse(l)
			want, wantOK := general.Parse(l)
			if !sameRecord(got, want) || gotOK != wantOK {
				t.Fatalf("engine %q, line %q:\nby hand %v %+v\ngeneral %v %+v", name, l, gotOK, got, wantOK, want)
			}
			if fast.Skipped != general.Skipped || fast.Cancelled != general.Cancelled || fast.Relative != general.Relative ||
				!fast.lastDate.Equal(general.lastDate) || fast.llamaKey != general.llamaKey || fast.id != general.id {
				t.Fatalf("engine %q, after line %q the parsers differ:\nby hand %+v\ngeneral %+v", name, l, fast, general)
			}
			if gotOK {
				read++
			}
		}
		if matched < 10_000 || read < 10_000 {
			t.Fatalf("engine %q: %d lines read by hand, %d records: the comparison saw too little", name, matched, read)
		}
		t.Logf("engine %q: %d of %d lines taken by the hand-made reader, %d records", name, matched, len(lines), read)
	}
}

// sameRecord compares records, their times as instants in the same zone
// (a stamp's zone is made anew for each line).
func sameRecord(a, b Record) bool {
	if !a.Time.Equal(b.Time) || a.Time.String() != b.Time.String() {
		return false
	}
	a.Time, b.Time = time.Time{}, time.Time{}
	return a == b
}

func TestLastIndexEAgreesWithLastIndex(t *testing.T) {
	pieces := []string{"Engine ", "Engine", "E", "ngine ", "EE", " ", "x", "000: "}
	r := rand.New(rand.NewPCG(9, 10))
	found := 0
	for range 50_000 {
		var b []byte
		for range r.IntN(7) {
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		got, want := lastIndexE(b, vllmEngine), bytes.LastIndex(b, vllmEngine)
		if got != want {
			t.Fatalf("lastIndexE(%q) = %d, bytes.LastIndex says %d", b, got, want)
		}
		if want >= 0 {
			found++
		}
	}
	if found < 1000 {
		t.Fatalf("only %d lines hold the text", found)
	}
}

// Keys made in shared blocks stay what they were made as, across blocks
// and however long the slot and task texts.
func TestKeyArenaKeysStay(t *testing.T) {
	var a keyArena
	var keys, want []string
	for i := range 20_000 {
		slot, task := strconv.Itoa(i%7), strconv.Itoa(i*7919)
		if i%1000 == 999 {
			task = strings.Repeat("9", keyBlock) // longer than a block
		}
		keys = append(keys, a.make([]byte(slot), []byte(task)))
		want = append(want, "slot "+slot+" task "+task)
	}
	for i := range keys {
		if keys[i] != want[i] {
			t.Fatalf("key %d is %.40q, made as %.40q", i, keys[i], want[i])
		}
	}
}
