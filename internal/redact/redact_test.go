package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://user:pw@influx:8086", "http://user:xxxxx@influx:8086"},
		{"https://admin:s3cr3t%40x@db.example:8086/path", "https://admin:xxxxx@db.example:8086/path"},
		{"http://influx:8086/write?db=x&u=admin&p=hunter2", "http://influx:8086/write?db=x&p=xxxxx&u=admin"},
		{"http://127.0.0.1:8000/metrics?token=abc", "http://127.0.0.1:8000/metrics?token=xxxxx"},
		{"http://user@influx:8086", "http://user@influx:8086"},
		{"http://localhost:8000/metrics", "http://localhost:8000/metrics"},
		{"http://user:pw@bad host", "http://user:xxxxx@bad host"},
	}
	for _, tc := range tests {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	got := Text(`Post "http://user:hunter2@influx:8086/api/v2/write": dial tcp: refused`)
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "user:xxxxx@influx") {
		t.Errorf("Text = %q", got)
	}
}
