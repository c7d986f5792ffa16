package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://user:pw@influx:8086", "http://user:xxxxx@influx:8086"},
		{"https://admin:s3cr3t%40x@db.example:8086/path", "https://admin:xxxxx@db.example:8086/path"},
		{"http://influx:8086/write?db=x&u=admin&p=hunter2", "http://influx:8086/write?db=x&u=admin&p=xxxxx"},
		{"http://127.0.0.1:8000/metrics?token=abc", "http://127.0.0.1:8000/metrics?token=xxxxx"},
		{"http://user@influx:8086", "http://user@influx:8086"},
		{"http://localhost:8000/metrics", "http://localhost:8000/metrics"},
		{"http://user:pw@bad host", "http://user:xxxxx@bad host"},
		// Every name the issue listed, in any case, the order kept.
		{"http://h/m?key=k1&api_key=k2&access_token=k3&password=k4&passwd=k5&pwd=k6", "http://h/m?key=xxxxx&api_key=xxxxx&access_token=xxxxx&password=xxxxx&passwd=xxxxx&pwd=xxxxx"},
		{"http://h/m?TOKEN=t1&Api_Key=t2&X-Auth-Token=t3&client_secret=t4&mySecretThing=t5", "http://h/m?TOKEN=xxxxx&Api_Key=xxxxx&X-Auth-Token=xxxxx&client_secret=xxxxx&mySecretThing=xxxxx"},
		{"http://h/m?format=text&page=2", "http://h/m?format=text&page=2"},
		{"http://h/m?id_token=a%20b#access_token=frag", "http://h/m?id_token=xxxxx#access_token=xxxxx"},
		{"http://u:pw@h/m?token=t", "http://u:xxxxx@h/m?token=xxxxx"},
		{"http://h/m?to%6Ben=t", "http://h/m?to%6Ben=xxxxx"}, // an escaped name is still its name
	}
	for _, tc := range tests {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestText(t *testing.T) {
	tests := []struct{ in, secret, want string }{
		{`Post "http://user:hunter2@influx:8086/api/v2/write": dial tcp: refused`, "hunter2", "user:xxxxx@influx"},
		// net/http's url.Error quotes the URL it was asked for.
		{`scrape s (http://127.0.0.1:1/metrics?token=xxxxx): Get "http://127.0.0.1:1/metrics?token=hunter2": dial tcp 127.0.0.1:1: connect: connection refused`,
			"hunter2", `Get "http://127.0.0.1:1/metrics?token=xxxxx": dial`},
		{`Get "http://h/m?a=1&API_KEY=hunter2&b=2": EOF`, "hunter2", `?a=1&API_KEY=xxxxx&b=2"`},
		{"server at http://h/m?session_token=hunter2 unreadable", "hunter2", "session_token=xxxxx unreadable"},
		{"url=http://h/m?x-secret=hunter2&y=1", "hunter2", "x-secret=xxxxx&y=1"},
	}
	for _, tc := range tests {
		got := Text(tc.in)
		if strings.Contains(got, tc.secret) || !strings.Contains(got, tc.want) {
			t.Errorf("Text(%q) = %q, want it to hold %q and not %q", tc.in, got, tc.want, tc.secret)
		}
	}
	// Words that only look like parameters are left alone.
	for _, s := range []string{"a=b c=d", "ratio key=value in a sentence", "http://h/m?format=text"} {
		if got := Text(s); got != s {
			t.Errorf("Text(%q) = %q, want it unchanged", s, got)
		}
	}
}
