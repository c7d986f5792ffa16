// Package redact masks credentials in URLs before they are printed: in
// logs, `tpsmon check`, /healthz and error messages.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

const mask = "xxxxx"

// secretParams are query parameters that carry credentials (InfluxDB 1.x
// takes u and p in the query string; proxies take token or api_key).
var secretParams = map[string]bool{
	"p": true, "password": true, "pass": true, "pwd": true, "token": true, "access_token": true,
	"api_key": true, "apikey": true, "key": true, "secret": true, "auth": true, "authorization": true,
}

// userinfo matches scheme://user:password@ in text that is not a URL on
// its own (an error message, a URL that does not parse).
var userinfo = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)([^/@\s:]*):([^/@\s]*)@`)

// URL returns u with its password and secret query parameters masked;
// a URL without secrets is returned as it was.
func URL(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return Text(u)
	}
	changed := false
	if _, ok := pu.User.Password(); ok {
		pu.User = url.UserPassword(pu.User.Username(), mask)
		changed = true
	}
	if pu.RawQuery != "" {
		q := pu.Query()
		for k := range q {
			if secretParams[strings.ToLower(k)] {
				q[k] = []string{mask}
				changed = true
			}
		}
		if changed {
			pu.RawQuery = q.Encode()
		}
	}
	if !changed {
		return u
	}
	return pu.String()
}

// Text masks the passwords of every URL written in s.
func Text(s string) string {
	return userinfo.ReplaceAllString(s, "${1}${2}:"+mask+"@")
}
