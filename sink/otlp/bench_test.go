package otlp

import (
	"context"
	"testing"
)

// BenchmarkExportWindow: one window of a GPU and two servers (about 40
// fields), decoded from the spool's line protocol and exported to the
// loopback receiver; the sizes are reported per window.
func BenchmarkExportWindow(b *testing.B) {
	for _, gz := range []bool{false, true} {
		name := "plain"
		if gz {
			name = "gzip"
		}
		b.Run(name, func(b *testing.B) {
			r := newReceiver(&testing.T{})
			defer r.srv.Close()
			w, err := New(Config{Endpoint: r.srv.URL, GZip: gz})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			lines := numericLP(&testing.T{}, windows(0, 1))
			b.ReportAllocs()
			for b.Loop() {
				if err := w.Write(context.Background(), lines); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(lines)), "lp_bytes/window")
			b.ReportMetric(float64(r.raw), "otlp_bytes/window")
			b.ReportMetric(float64(r.wire), "wire_bytes/window")
		})
	}
}

// BenchmarkDecodeBacklog: a spool batch of 1 MiB after an outage.
func BenchmarkDecodeBacklog(b *testing.B) {
	lines := numericLP(&testing.T{}, windows(0, 1000))
	for len(lines) < 1<<20 {
		lines = append(lines, numericLP(&testing.T{}, windows(len(lines), len(lines)+100))...)
	}
	b.SetBytes(int64(len(lines)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(lines); err != nil {
			b.Fatal(err)
		}
	}
}
