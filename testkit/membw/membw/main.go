// Command membw prints the memory bandwidth probe's figure, in GB/s. Tests
// run it as a process of its own: built into a -race test binary, the
// probe's every load and copy is instrumented and reads a tenth of the
// machine's bandwidth (3 GB/s where the machine streams 30).
package main

import (
	"flag"
	"fmt"

	"github.com/tpsmon/tpsmon/testkit/membw"
)

func main() {
	threads := flag.Int("threads", 1, "goroutines streaming at once")
	rounds := flag.Int("rounds", 3, "rounds; the best pass counts")
	flag.Parse()
	fmt.Printf("%.3f\n", membw.Probe(*threads, *rounds))
}
