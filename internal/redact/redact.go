// Package redact masks credentials in URLs before they are printed: in
// logs, `tpsmon check`, /readyz and error messages (net/http's url.Error
// quotes the whole URL it was asked for).
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

const mask = "xxxxx"

// secretParams are query parameters that carry credentials by their
// exact name (InfluxDB 1.x takes u and p in the query string).
var secretParams = map[string]bool{
	"p": true, "pass": true, "pwd": true, "key": true, "auth": true, "authorization": true, "sig": true,
}

// secretParts mark a parameter as a credential wherever they appear in
// its name: token, access_token, X-Auth-Token, client_secret, api_key.
var secretParts = []string{"token", "secret", "password", "passwd", "apikey", "api_key", "api-key",
	"signature", "credential"}

// Secret tells whether a query parameter of this name carries a
// credential, in any case: the names above, and any name ending in _key
// or -key (private_key, access-key).
func Secret(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.ToLower(name)
	if secretParams[name] || strings.HasSuffix(name, "_key") || strings.HasSuffix(name, "-key") {
		return true
	}
	for _, p := range secretParts {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

// userinfo matches scheme://user:password@ in text that is not a URL on
// its own (an error message, a URL that does not parse).
var userinfo = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)([^/@\s:]*):([^/@\s]*)@`)

// param matches one name=value of a query string or fragment, in a URL or
// in text quoting one: it starts after ?, & or #, and the value ends where
// a URL would (&, #, a quote, a blank, a bracket).
var param = regexp.MustCompile(`([?&#;])([^=&#?\s"'<>()\[\]{}]+)=([^&#\s"'<>()\[\]{}]*)`)

// URL returns u with its password and secret query parameters masked,
// the rest as written; a URL without secrets is returned as it was.
func URL(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return Text(u)
	}
	if _, ok := pu.User.Password(); ok {
		u = userinfo.ReplaceAllString(u, "${1}${2}:"+mask+"@")
	}
	return params(u)
}

// Text masks the passwords and secret query parameters of every URL
// written in s.
func Text(s string) string {
	return params(userinfo.ReplaceAllString(s, "${1}${2}:"+mask+"@"))
}

// params masks the values of secret parameters in s, keeping their
// names and order.
func params(s string) string {
	if !strings.ContainsAny(s, "?&#;") {
		return s
	}
	return param.ReplaceAllStringFunc(s, func(m string) string {
		sub := param.FindStringSubmatch(m)
		if !Secret(sub[2]) || sub[3] == mask {
			return m
		}
		return sub[1] + sub[2] + "=" + mask
	})
}
