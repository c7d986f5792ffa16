package report

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/tpsmon/tpsmon/testkit/syncbuf"
)

// The package's screenshots share one headless Chromium and its first tab:
// on a 2-core machine starting the browser costs ~6 CPU-seconds and a new
// tab's renderer ~1 more, against ~1.5 for rendering a report, and the
// package renders five. Screenshots take turns (the mutex).
var browser struct {
	sync.Mutex
	tab   context.Context // chromedp context of the started browser's tab; nil until the first screenshot
	close func()          // stops the browser
	out   syncbuf.Buffer  // what Chromium printed, for failures
}

// chromiumBin finds Chromium on PATH.
func chromiumBin() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startBrowser starts the shared browser; browser's lock is held.
func startBrowser(bin string) error {
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoFirstRun, chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 2400), chromedp.CombinedOutput(&browser.out))
	tab, cancelTab := chromedp.NewContext(alloc)
	stop := func() { cancelTab(); cancelAlloc() }
	// The first Do starts the browser and ties it to tab, which must
	// therefore have no deadline: the start's limit is a timer instead.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(tab) }()
	select {
	case err := <-started:
		if err != nil {
			stop()
			return fmt.Errorf("start chromium: %w", err)
		}
	case <-time.After(60 * time.Second):
		stop()
		<-started
		return fmt.Errorf("chromium did not start within 60 s")
	}
	browser.tab, browser.close = tab, stop
	return nil
}

// warmBrowser starts the shared browser in the background, where
// Chromium is installed, so that its start overlaps the test's writes;
// a screenshot waits for it (the lock is taken before this returns).
// A failed start shows at the screenshot, which tries again.
func warmBrowser() {
	bin := chromiumBin()
	if bin == "" {
		return
	}
	locked := make(chan struct{})
	go func() {
		browser.Lock()
		close(locked)
		defer browser.Unlock()
		if browser.tab == nil {
			startBrowser(bin)
		}
	}()
	<-locked
}

// closeBrowser stops the shared browser, if one runs.
func closeBrowser() {
	browser.Lock()
	defer browser.Unlock()
	stopBrowser()
}

// stopBrowser stops the shared browser; browser's lock is held.
func stopBrowser() {
	if browser.close != nil {
		browser.close()
		browser.tab, browser.close = nil, nil
	}
}

// screenshot renders a page with headless Chromium into a PNG of
// 1280x2400 pixels, in the shared browser (started on first use, stopped
// by TestMain, and again after a failure so the next page gets a fresh one).
func screenshot(t *testing.T, page, out string) {
	t.Helper()
	bin := chromiumBin()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no chromium on PATH, and CI must run this test: `make chromium` (as root) installs it")
		}
		t.Skip("no chromium on PATH and not installable here: `make chromium` installs it as root")
	}
	browser.Lock()
	defer browser.Unlock()
	if browser.tab == nil {
		if err := startBrowser(bin); err != nil {
			t.Fatalf("%v\n%s", err, browser.out.String())
		}
	}
	ctx, cancel := context.WithTimeout(browser.tab, 60*time.Second)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 2400), chromedp.Navigate("file://"+page))
	var png []byte
	if err == nil {
		png, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
	}
	if err != nil {
		stopBrowser()
		t.Fatalf("chromium: %v\n%s", err, browser.out.String())
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	closeBrowser()
	os.Exit(code)
}
