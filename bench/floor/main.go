// Command floor is the least a Go daemon doing S1's input and output
// costs: the bench harness runs it beside each side of S1, on the same
// server, log and InfluxDB, to show how much of a side's CPU is the work
// every such daemon has and how much the machine's noise moves it.
//
// It does what tpsmon's S1 configuration asks for and nothing more: one
// process thread for Go code (tpsmon's default), a tick at every whole
// second, the two metrics pages fetched on it and thrown away, the log
// read when a notification says it grew, and every 10 s one appended,
// fsync'd record and one InfluxDB write. No parsing, no joining.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

func main() {
	base := flag.String("url", "", "base URL of the metrics pages (/vllm and /sglang)")
	logPath := flag.String("log", "", "the log to follow")
	influx := flag.String("influx", "", "InfluxDB base URL")
	db := flag.String("db", "floor", "InfluxDB database")
	spool := flag.String("spool", "", "file the 10 s records are appended to")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, *base, *logPath, *influx, *db, *spool); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, base, logPath, influx, db, spool string) error {
	f, err := os.Open(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(logPath); err != nil {
		return err
	}
	sp, err := os.OpenFile(spool, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer sp.Close()

	cl := &http.Client{Timeout: 5 * time.Second}
	pages := []string{base + "/vllm", base + "/sglang"}
	record := bytes.Repeat([]byte("x"), 4<<10) // about a window of S1's points
	point := fmt.Sprintf("%s/write?db=%s", influx, db)
	buf := make([]byte, 64<<10)
	tick := time.NewTimer(untilNextSecond())
	defer tick.Stop()
	for n := 1; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Events:
			for {
				if k, _ := f.Read(buf); k == 0 {
					break
				}
			}
		case err := <-w.Errors:
			return err
		case <-tick.C:
			tick.Reset(untilNextSecond())
			fetchAll(ctx, cl, pages)
			if n%10 == 0 {
				if _, err := sp.Write(record); err != nil {
					return err
				}
				if err := sp.Sync(); err != nil {
					return err
				}
				post(ctx, cl, point, []byte("floor v=1\n"))
			}
			n++
		}
	}
}

func untilNextSecond() time.Duration {
	now := time.Now()
	return now.Truncate(time.Second).Add(time.Second).Sub(now)
}

// fetchAll fetches the pages at once and discards them.
func fetchAll(ctx context.Context, cl *http.Client, pages []string) {
	var wg sync.WaitGroup
	for _, u := range pages {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			if err != nil {
				return
			}
			if resp, err := cl.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

func post(ctx context.Context, cl *http.Client, u string, body []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return
	}
	if resp, err := cl.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
