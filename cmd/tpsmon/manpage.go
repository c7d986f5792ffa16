//go:build manpages

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The man page writer is in the build packaging makes its pages with
// (-tags manpages), not in the daemon: its Markdown renderer alone kept
// ~200 KB of tables on every node's heap from start to exit.
func init() { extraCommands = append(extraCommands, newManCmd) }

// newManCmd writes the man pages of every command; packaging runs it at
// build time, so the pages always match the flags.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write man pages (section 1) for every command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.DisableAutoGenTag = true
			hdr := &doc.GenManHeader{Title: "TPSMON", Section: "1", Source: "tpsmon " + version, Manual: "tpsmon manual"}
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			if err := doc.GenManTree(root, hdr, args[0]); err != nil {
				return fmt.Errorf("man pages into %s: %w", args[0], err)
			}
			return nil
		},
	}
}
