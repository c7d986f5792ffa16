package main

import (
	"fmt"
	"io"

	"github.com/tpsmon/tpsmon/daemon/agent"
	"github.com/tpsmon/tpsmon/sink"
)

// newOutput returns the writer for a --format value.
func newOutput(format string, w io.Writer) (agent.WindowWriter, error) {
	switch format {
	case "table":
		return sink.NewTableWriter(w), nil
	case "lp":
		return sink.NewLPWriter(w), nil
	case "json":
		return sink.NewJSONWriter(w), nil
	}
	return nil, fmt.Errorf("--format %q: want table, lp or json", format)
}
