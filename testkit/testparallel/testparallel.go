// Package testparallel sets how many parallel tests a test process runs
// when the command line does not say.
package testparallel

import (
	"flag"
	"fmt"
)

// AtLeast lets n tests that call t.Parallel run at once, unless
// -test.parallel was given (or asks for more). The default is GOMAXPROCS,
// right for tests that compute; the tests of a package that calls this
// mostly wait on the processes they start and on real time, so on a
// 2-core machine the default left them queueing behind each other.
// Call it from TestMain, before m.Run.
func AtLeast(n int) error {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	p := flag.Lookup("test.parallel")
	if given || p == nil {
		return nil
	}
	if g, ok := p.Value.(flag.Getter); ok {
		if cur, ok := g.Get().(int); ok && cur >= n {
			return nil
		}
	}
	if err := p.Value.Set(fmt.Sprint(n)); err != nil {
		return fmt.Errorf("test.parallel: %w", err)
	}
	return nil
}
