package main

import (
	"strings"
	"testing"
	"time"
)

func TestReportRange(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s string) time.Time { v, _ := time.Parse(time.RFC3339, s); return v }
	for _, c := range []struct {
		args           []string
		from, to, fail string
	}{
		{nil, "2026-11-30T12:00:00Z", "2026-12-01T12:00:00Z", ""},
		{[]string{"--since", "2h"}, "2026-12-01T10:00:00Z", "2026-12-01T12:00:00Z", ""},
		{[]string{"--from", "2026-11-01T00:00:00Z", "--to", "2026-11-02T00:00:00Z"}, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z", ""},
		{[]string{"--from", "2026-11-01T00:00:00Z"}, "2026-11-01T00:00:00Z", "2026-12-01T12:00:00Z", ""},
		{[]string{"--from", "2026-11-01T00:00:00Z", "--since", "6h"}, "2026-11-01T00:00:00Z", "2026-11-01T06:00:00Z", ""},
		{[]string{"--to", "2026-11-02T00:00:00+02:00", "--since", "1h"}, "2026-11-01T21:00:00Z", "2026-11-01T22:00:00Z", ""},
		{[]string{"--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z"}, "", "", "is not before"},
		{[]string{"--from", "yesterday"}, "", "", `--from "yesterday": want RFC3339`},
		{[]string{"--to", "2026-11-02"}, "", "", `--to "2026-11-02": want RFC3339`},
	} {
		cmd := newReportCmd()
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		f := cmd.Flags()
		fromS, _ := f.GetString("from")
		toS, _ := f.GetString("to")
		since, _ := f.GetDuration("since")
		from, to, err := reportRange(cmd, fromS, toS, since, now)
		if c.fail != "" {
			if err == nil || !strings.Contains(err.Error(), c.fail) {
				t.Errorf("%v: error %v, want %q", c.args, err, c.fail)
			}
			continue
		}
		if err != nil || !from.Equal(at(c.from)) || !to.Equal(at(c.to)) {
			t.Errorf("%v: %v – %v (%v), want %s – %s", c.args, from, to, err, c.from, c.to)
		}
	}
}
