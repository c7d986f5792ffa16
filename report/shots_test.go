package report

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/sim/fleetsim"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

var shots = flag.String("shots", "", "also save the range screenshots of TestReportRanges in this directory")

// simWrite is one generator and the bucket it goes to.
type simWrite struct {
	bucket string
	gen    func(func(*write.Point) error) error
}

// writeSims writes each generator's points at once: InfluxDB ingests
// them on as many cores as there are, the test's process encodes them.
func writeSims(t *testing.T, base string, ws ...simWrite) {
	t.Helper()
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = sendSim(base, w.bucket, w.gen) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func sendSim(base, bucket string, gen func(func(*write.Point) error) error) error {
	in, err := sink.NewInflux(sink.InfluxConfig{URL: base, Bucket: bucket, Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer in.Close()
	enc := sink.NewEncoder()
	var buf []byte
	flush := func() error {
		err := in.Write(context.Background(), buf)
		buf = buf[:0]
		return err
	}
	err = gen(func(p *write.Point) error {
		if buf, err = enc.AppendWrite(buf, p); err != nil {
			return err
		}
		if len(buf) > 4<<20 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", bucket, err)
	}
	return nil
}

// TestReportRanges renders the report of a simulated fleet at four ranges
// in headless Chromium: ten minutes of 5-second windows, a day of
// 1-minute windows, 30 days of hourly and 90 days of daily rollups.
func TestReportRanges(t *testing.T) {
	t.Parallel()
	warmBrowser()
	base := influxtest.URL(t)
	// Six hosts: enough for a fleet's charts and an unused GPU, few enough
	// that InfluxDB's ingest (most of the test's CPU) stays short.
	fleet := fleetsim.Fleet{Hosts: 6, GPUs: 4, Unused: 2, Model: "NVIDIA H100 80GB HBM3"}
	end := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	short := influxtest.CreateDB(t, base, "shots10m")
	db := influxtest.CreateDB(t, base, "shots")
	for _, rp := range []string{"tpsmon_1h", "tpsmon_1d"} {
		influxtest.Query(t, base, db, fmt.Sprintf(`CREATE RETENTION POLICY "%s" ON "%s" DURATION 0s REPLICATION 1`, rp, db))
	}
	writeSims(t, base,
		simWrite{short, func(e func(*write.Point) error) error {
			return fleet.Raw(end.Add(-10*time.Minute), end, 5*time.Second, e)
		}},
		// 2-minute windows: the day's plan reads raw 10-minute buckets
		// either way, from half the points of 1-minute ones.
		simWrite{db, func(e func(*write.Point) error) error {
			return fleet.Raw(end.Add(-24*time.Hour), end, 2*time.Minute, e)
		}},
		simWrite{db + "/tpsmon_1h", func(e func(*write.Point) error) error {
			return fleet.Rollups(end.Add(-30*24*time.Hour), end, time.Hour, "_1h", e)
		}},
		simWrite{db + "/tpsmon_1d", func(e func(*write.Point) error) error {
			return fleet.Rollups(end.Add(-90*24*time.Hour), end, 24*time.Hour, "_1d", e)
		}})
	prices := Options{Prices: map[string]float64{"NVIDIA H100 80GB HBM3": 2.5}}
	for _, tc := range []struct {
		name      string
		db        string
		span      time.Duration
		level     string
		interval  time.Duration
		minPoints int
	}{
		{"10m", short, 10 * time.Minute, Raw, 5 * time.Second, 120},
		{"24h", db, 24 * time.Hour, Raw, time.Hour, 24},
		{"30d", db, 30 * 24 * time.Hour, Hourly, 6 * time.Hour, 120},
		{"90d", db, 90 * 24 * time.Hour, Daily, 24 * time.Hour, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := NewClient(base, tc.db, "", 60*time.Second)
			ctx := context.Background()
			f, err := Plan(ctx, c, Filter{From: end.Add(-tc.span), To: end})
			if err != nil {
				t.Fatal(err)
			}
			if f.Level != tc.level || f.Interval != tc.interval {
				t.Errorf("plan: %s every %v, want %s every %v", f.Level, f.Interval, tc.level, tc.interval)
			}
			r, err := Build(ctx, c, f, prices)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Fleet) < tc.minPoints {
				t.Errorf("%d fleet points, want at least %d", len(r.Fleet), tc.minPoints)
			}
			// 6 hosts of 4 GPUs all along; every fifth host (0 and 5)
			// leaves 2 unused.
			if want := 24 * tc.span.Hours(); math.Abs(r.GPUHours-want) > 1e-6*want {
				t.Errorf("GPU-hours %v, want %v", r.GPUHours, want)
			}
			var unused float64
			for _, s := range r.Waste {
				if s.State == Unused {
					unused = s.GPUHours
				}
			}
			if want := 2 * 2 * tc.span.Hours(); math.Abs(unused-want) > 1e-6*want {
				t.Errorf("unused GPU-hours %v, want %v", unused, want)
			}
			if tc.name == "10m" {
				// The 2-minute phases show: the fleet's rate varies by more
				// than 3x between buckets.
				lo, hi := math.Inf(1), 0.0
				for _, p := range r.Fleet {
					lo, hi = math.Min(lo, p.TPS), math.Max(hi, p.TPS)
				}
				if hi < 3*lo {
					t.Errorf("fleet tokens/s from %v to %v: the phases do not show", lo, hi)
				}
			}
			dir := t.TempDir()
			html := filepath.Join(dir, "report.html")
			out, _ := os.Create(html)
			if err := WriteHTML(out, r); err != nil {
				t.Fatal(err)
			}
			out.Close()
			page, _ := os.ReadFile(html)
			if strings.Contains(string(page), "kv_bound") {
				t.Error("a column or row for kv_bound, which did not occur")
			}
			shot := filepath.Join(dir, "report.png")
			screenshot(t, html, shot)
			checkNotBlank(t, shot)
			if *update && tc.name == "24h" {
				b, _ := os.ReadFile(shot)
				if err := os.WriteFile(filepath.Join("..", "docs", "report.png"), b, 0o644); err != nil {
					t.Error(err)
				}
			}
			if *shots != "" {
				b, _ := os.ReadFile(shot)
				if err := os.WriteFile(filepath.Join(*shots, "report-"+tc.name+".png"), b, 0o644); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
