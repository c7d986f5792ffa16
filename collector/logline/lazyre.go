package logline

import (
	"regexp"
	"sync"
)

// lazyRE is a regular expression compiled on first use. A node runs one
// or two engines; compiled at start, every engine's expressions stayed on
// the daemon's heap from start to exit (~0.3 MB). Its methods are the
// regexp methods the parsers call.
type lazyRE struct {
	re func() *regexp.Regexp
}

func lazy(expr string) lazyRE {
	return lazyRE{re: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })}
}

func (l lazyRE) Find(b []byte) []byte                 { return l.re().Find(b) }
func (l lazyRE) FindSubmatch(b []byte) [][]byte       { return l.re().FindSubmatch(b) }
func (l lazyRE) FindString(s string) string           { return l.re().FindString(s) }
func (l lazyRE) FindStringSubmatch(s string) []string { return l.re().FindStringSubmatch(s) }
func (l lazyRE) MatchString(s string) bool            { return l.re().MatchString(s) }
func (l lazyRE) ReplaceAll(src, repl []byte) []byte   { return l.re().ReplaceAll(src, repl) }
func (l lazyRE) ReplaceAllString(src, repl string) string {
	return l.re().ReplaceAllString(src, repl)
}
func (l lazyRE) FindAllStringSubmatch(s string, n int) [][]string {
	return l.re().FindAllStringSubmatch(s, n)
}
