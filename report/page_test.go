package report

import (
	"bytes"
	"go/format"
	"os"
	"testing"

	"github.com/a-h/templ"
	"github.com/a-h/templ/generator"
	"github.com/a-h/templ/parser/v2"
)

// TestPageIsGenerated: page_templ.go is what templ generate makes of
// page.templ (run `go run github.com/a-h/templ/cmd/templ@v0.3.1118
// generate -f page.templ` in report/ after editing it).
func TestPageIsGenerated(t *testing.T) {
	tf, err := parser.Parse("page.templ")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := generator.Generate(tf, &b, generator.WithVersion(templ.Version()), generator.WithFileName("page.templ")); err != nil {
		t.Fatal(err)
	}
	want, err := format.Source(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("page_templ.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("page_templ.go is not page.templ's: generate it again (see this test's comment)")
	}
}
