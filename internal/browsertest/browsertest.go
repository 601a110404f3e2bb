// Package browsertest drives pages in a real headless Chromium for tests, with
// chromedp: one browser per test binary, one fresh tab (and browser context,
// so no storage is shared) per test. Without Chromium a test skips with a loud
// message; under CI=true it fails, so a missing install step cannot pass
// unnoticed. Waits are conditions polled in the page, never fixed sleeps.
package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Timeout bounds one test's use of its tab, and Wait one wait for a
// condition: generous, for a loaded machine.
const (
	Timeout = 5 * time.Minute
	Wait    = 2 * time.Minute
)

var (
	once    sync.Once
	browser context.Context
	stop    context.CancelFunc
	err     error
)

// Run runs a package's tests and stops the browser they started. Call it
// from TestMain: os.Exit(browsertest.Run(m)).
func Run(m *testing.M) int {
	defer Stop()
	return m.Run()
}

// Stop stops the browser the package's tests started, if any: for a
// TestMain that runs the tests itself.
func Stop() {
	if stop != nil {
		stop()
	}
}

// find returns the path of Chromium (or Chrome) on this machine.
func find() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH (apt-get install chromium)")
}

// start starts the package's browser.
func start() (context.Context, context.CancelFunc, error) {
	path, err := find()
	if err != nil {
		return nil, nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1000, 700))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root without it
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		return nil, nil, fmt.Errorf("starting %s: %w", path, err)
	}
	return ctx, func() { cancel(); cancelAlloc() }, nil
}

// Tab returns a context for a new tab of the package's browser, in its own
// browser context, closed when t ends and bounded by Timeout.
func Tab(t testing.TB) context.Context {
	t.Helper()
	once.Do(func() { browser, stop, err = start() })
	if err != nil {
		msg := fmt.Sprintf("Chromium is not available: %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a skipped browser test is a failure; .ci/run must install chromium)", msg)
		}
		t.Skipf("SKIPPING browser test: %s", msg)
	}
	tab, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("opening a tab: %v", err)
	}
	ctx, cancelTimeout := context.WithTimeout(tab, Timeout)
	t.Cleanup(cancelTimeout)
	return ctx
}

// WaitText waits until an element matching the CSS selector sel has text
// containing text.
func WaitText(sel, text string) chromedp.Action[chromedp.Void] {
	s, _ := json.Marshal(sel)
	x, _ := json.Marshal(text)
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(
		`Array.from(document.querySelectorAll(%s)).some((e) => e.textContent.includes(%s))`, s, x),
		chromedp.WithPollingTimeout(Wait), chromedp.WithPollingInterval(50*time.Millisecond))
}

// WaitCount waits until at least n elements match the CSS selector sel.
func WaitCount(sel string, n int) chromedp.Action[chromedp.Void] {
	s, _ := json.Marshal(sel)
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelectorAll(%s).length >= %d`, s, n),
		chromedp.WithPollingTimeout(Wait), chromedp.WithPollingInterval(50*time.Millisecond))
}

// Do runs steps in ctx's tab and fails t, naming what, on an error, with
// the text the page showed.
func Do(t testing.TB, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		page, perr := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		if perr != nil {
			page = "(unreadable: " + perr.Error() + ")"
		}
		t.Fatalf("%s: %v\nthe page showed:\n%s", what, err, page)
	}
}
