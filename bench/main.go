// Command bench runs tpsmon and Telegraf on the same work, one after the
// other, on this machine, and writes a table of what each cost to
// bench/RESULTS.md. Usage (from the repository root):
//
//	go run ./bench [-minutes 3] [-runs 3] [-s3-minutes 10] [-lines 300000] [-only S1,S2,S3,R] [-sides tpsmon,telegraf] [-profile DIR]
//
// S1 is a steady node: 8 GPUs (tpsmon's sim backend; Telegraf's nvidia_smi
// input reading a stand-in nvidia-smi that prints an 8-GPU document built
// from the A100 capture in Telegraf's own test data), a vLLM-format and an
// SGLang-format metrics endpoint with histograms, and a vLLM log written at
// one line a second, all at 1 Hz into a real InfluxDB. S2 appends a vLLM V1
// and a llama.cpp log as fast as possible and counts lines per CPU second.
// S3 is tpsmon alone with 64 GPUs and 16 servers for ten minutes. R runs
// `tpsmon replay` on a noise-heavy vLLM log and on S2's two logs.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == spawnArg {
		if err := spawn(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	minutes := flag.Float64("minutes", 3, "length of each S1 run")
	s3Minutes := flag.Float64("s3-minutes", 10, "length of the S3 run")
	lines := flag.Int("lines", 300000, "S2 and R: lines of each log")
	only := flag.String("only", "S1,S2,S3,R", "scenarios to run")
	runs := flag.Int("runs", 3, "S1, S2 and R: runs per side (R: per log), reported as min / median / max")
	out := flag.String("out", "bench/RESULTS.md", "where the results go")
	sides := flag.String("sides", "tpsmon,telegraf", "S1: which daemons run (a single side for profiling)")
	profile := flag.String("profile", "", "S1: write tpsmon's CPU and allocation profiles of the steady state to this folder (numbers taken with it are not for RESULTS.md)")
	scrape := flag.String("scrape", "", "S1: tpsmon serves /metrics and the harness reads it every window, with its joined windows on it (windows) or without (nowindows)")
	flag.Parse()
	log.SetFlags(log.Ltime)

	work, err := os.MkdirTemp("", "tpsmon-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(work)
	if *scrape != "" && *scrape != "windows" && *scrape != "nowindows" {
		log.Fatalf("-scrape %q: want windows or nowindows", *scrape)
	}
	h := &harness{work: work, sides: strings.Split(*sides, ","), profile: *profile, scrape: *scrape}
	if h.profile != "" {
		if err := os.MkdirAll(h.profile, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	if err := h.build(); err != nil {
		log.Fatal(err)
	}
	defer h.stopAll()
	var sections []string
	run := func(name string, f func() (string, error)) {
		if !strings.Contains(*only, name) {
			return
		}
		log.Printf("== %s", name)
		s, err := f()
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		sections = append(sections, s)
	}
	run("S1", func() (string, error) { return h.s1(time.Duration(*minutes*float64(time.Minute)), max(1, *runs)) })
	run("S2", func() (string, error) { return h.s2(*lines, max(1, *runs)) })
	run("S3", func() (string, error) { return h.s3(time.Duration(*s3Minutes * float64(time.Minute))) })
	run("R", func() (string, error) { return h.replay(*lines, max(1, *runs)) })
	report := h.header(os.Args[1:]) + strings.Join(sections, "\n")
	// Keep the section ./bench/reportscale writes into the same file.
	if old, err := os.ReadFile(*out); err == nil {
		if i := strings.Index(string(old), "<!-- report-scale"); i >= 0 {
			report += "\n" + string(old[i:])
		}
	}
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Print(report)
	log.Printf("written to %s", filepath.Clean(*out))
}
