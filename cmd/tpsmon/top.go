package main

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/daemon/top"
)

func newTopCmd() *cobra.Command {
	var (
		addr  string
		once  bool
		every time.Duration
		width int
		asc   bool
		floor float64
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch the node live: servers and GPUs, window by window",
		Long: `top shows what the daemon sees, live: one row per server (state, tokens
per second, per user, queue, KV cache, tokens per joule, a sparkline of its
tokens per second; under them, where they fit, each server's headroom
under --per-user-floor over the windows top holds) and one per GPU (utilization, SM activity, memory,
power, temperature, throttle reasons, the server using it). It reads the
daemon's ` + "`/api/v1/windows`" + ` on its http.listen address.
Keys: q quits, s changes the order, f shows only what needs a look.
--once, or an output that is not a terminal, prints one plain snapshot and
exits (scripts, tickets).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := top.NewClient(addr, &http.Client{Timeout: 5 * time.Second, CheckRedirect: collector.RefuseRedirect})
			if err != nil {
				return err
			}
			if !(floor > 0) || math.IsInf(floor, 0) {
				return fmt.Errorf("--per-user-floor %v: want a positive number of tokens/s", floor)
			}
			cfg := top.Config{Client: c, Every: every, ASCII: asc || os.Getenv("TERM") == "dumb", Floor: floor}
			// Not a terminal (a pipe, a file): one snapshot, as --once.
			if !once && !term.IsTerminal(os.Stdout.Fd()) {
				once = true
			}
			if once {
				if width == 0 {
					width = onceWidth()
				}
				return top.Once(cmd.Context(), cfg, cmd.OutOrStdout(), width)
			}
			return top.Run(cmd.Context(), cfg, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:9464", "the daemon's http.listen address")
	f.BoolVar(&once, "once", false, "print one plain snapshot and exit")
	f.DurationVar(&every, "interval", time.Second, "how often to ask the daemon")
	f.IntVar(&width, "width", 0, "--once: columns (default: the terminal's, or $COLUMNS, or 120)")
	f.BoolVar(&asc, "ascii", false, "draw sparklines in ASCII (default on TERM=dumb)")
	f.Float64Var(&floor, "per-user-floor", 20, "per-user tokens/s objective of each server's operating point line (headroom), over the windows top holds")
	return cmd
}

// onceWidth is the terminal's width, else $COLUMNS, else 120.
func onceWidth() int {
	if w, _, err := term.GetSize(os.Stdout.Fd()); err == nil && w > 0 {
		return w
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return 120
}
