package logline

import (
	"fmt"
	"strings"
	"time"
)

// format renders a record compactly for table tests: only the numbers the
// line carries, as parsed.
func format(r Record) string {
	var b strings.Builder
	kinds := map[Kind]string{Stat: "stat", Request: "request", Progress: "progress", Batch: "batch", Iteration: "iteration", Spec: "spec", Cached: "cached", Cancelled: "cancelled", Failed: "failed"}
	b.WriteString(kinds[r.Kind])
	f := func(name string, v float64) {
		if v >= 0 {
			fmt.Fprintf(&b, " %s=%.6g", name, v)
		}
	}
	f("gen", r.GenTPS)
	f("prompt", r.PromptTPS)
	f("tokens", r.Tokens)
	f("prompt_tokens", r.PromptTokens)
	switch {
	case r.Kind == Stat && r.Duration > 0:
		fmt.Fprintf(&b, " span=%v", r.Duration.Round(time.Millisecond))
	case r.Duration > 0:
		fmt.Fprintf(&b, " dur=%v", r.Duration)
	}
	f("user", r.UserTPS)
	if r.SinceStartTPS >= 0 && r.SinceStartTPS != r.UserTPS {
		f("avg", r.SinceStartTPS)
	}
	f("run", r.Running)
	f("wait", r.Waiting)
	f("kv", r.KV)
	f("preempt", r.Preemptions)
	f("iter", r.Iterations)
	f("drafted", r.Drafted)
	f("accepted", r.Accepted)
	f("cached", r.Cached)
	if r.Key != "" {
		fmt.Fprintf(&b, " key=%q", r.Key)
	}
	if r.Aggregated {
		b.WriteString(" aggregated")
	}
	if !r.Time.IsZero() {
		fmt.Fprintf(&b, " t=%s", r.Time.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}
