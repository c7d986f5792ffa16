package main

import (
	"fmt"
	"os"
	"time"

	"github.com/tpsmon/tpsmon/report"
)

func main() {
	end := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	f := report.Filter{From: end.Add(-24 * time.Hour), To: end, Level: report.Raw, Interval: time.Hour}
	for _, q := range []report.Query{report.CurveWindows, report.LatencyBuckets, report.AttainmentBuckets} {
		if len(os.Args) > 1 && os.Args[1] != q.Name {
			continue
		}
		t, err := f.Render(q, "")
		fmt.Println(t, err)
	}
}
