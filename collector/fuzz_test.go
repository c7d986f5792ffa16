package collector

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// FuzzMetricsPage runs the whole metrics path on arbitrary pages: parse,
// detect, read, derive. No panic, no NaN, no negative interval.
func FuzzMetricsPage(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.prom")
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, page []byte) {
		p, err := ParsePage(bytes.NewReader(page))
		if err != nil {
			return
		}
		d, err := Detect(p)
		if err != nil {
			return
		}
		var der Deriver
		for i := range 3 {
			s, err := d.Read(p)
			if err != nil {
				return
			}
			s.Time = time.Unix(1000+int64(i), 0)
			s = der.Derive(s)
			for c := range sample.NumCounters {
				if s.HasCounter[c] && (math.IsNaN(s.Counter[c]) || math.IsInf(s.Counter[c], 0)) {
					t.Fatalf("%v = %v", c, s.Counter[c])
				}
			}
			for _, iv := range s.Intervals {
				if iv.End.Before(iv.Start) || math.IsNaN(iv.Tokens) {
					t.Fatalf("interval %+v", iv)
				}
			}
		}
	})
}
