package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/botrun/botrun/host/dryrun"
	"github.com/botrun/botrun/internal/browsertest"
	"github.com/botrun/botrun/internal/waitfor"
	"github.com/botrun/botrun/internal/wasmbuild"
)

// dryRunTraffic tells the console's bot (echo) "hi" in c1 and "panic" in c2
// and waits until both are done.
func dryRunTraffic(t *testing.T, base string) {
	t.Helper()
	for i, m := range []struct{ chat, text string }{{"c1", "hi"}, {"c2", "panic"}} {
		body := fmt.Sprintf(`{"chat":%q,"from":"u","text":%q,"id":"m%d"}`, m.chat, m.text, i+1)
		resp, err := http.Post(base+"/webchat/web/messages", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	var body string
	if !waitfor.True(2*time.Minute, func() bool {
		_, body = call(t, "GET", base+"/admin/inbox?state=done", token)
		return strings.Count(body, `"state":"done"`) == 2
	}) {
		t.Fatalf("the two messages were not done in 2 minutes: %s", body)
	}
}

// upload posts module to POST /admin/replay/dry-run with tok.
func upload(t *testing.T, base, tok string, module []byte) (int, string) {
	t.Helper()
	return callWith(t, "POST", base+"/admin/replay/dry-run?name=candidate.wasm", tok, bytes.NewReader(module))
}

// TestDryRunAPI: POST /admin/replay/dry-run needs the token, refuses an
// empty or oversized module, and answers the summary, the report and the
// records that did not replay identically: the same echo passes, a module
// that traps on "panic" fails the gate with that record as a new fault.
func TestDryRunAPI(t *testing.T) {
	roomyDeadline(t)
	base, echoWasm := consoleWithTraffic(t)
	faulty, err := os.ReadFile(cFaulty(t))
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := upload(t, base, "", echoWasm); code != http.StatusUnauthorized {
		t.Fatalf("without the token: HTTP %d", code)
	}
	if code, body := upload(t, base, token, nil); code != http.StatusBadRequest {
		t.Fatalf("no module: HTTP %d %s", code, body)
	}
	if code, body := upload(t, base, token, make([]byte, dryrun.MaxModuleBytes+1)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a module over the cap: HTTP %d %s", code, body)
	}
	var same DryRun
	code, body := upload(t, base, token, echoWasm)
	if err := json.Unmarshal([]byte(body), &same); code != 200 || err != nil || same.Failed || same.Summary.Identical != 2 || len(same.Results) != 0 {
		t.Fatalf("the same echo: HTTP %d %s", code, body)
	}
	var trap DryRun
	code, body = upload(t, base, token, faulty)
	if err := json.Unmarshal([]byte(body), &trap); code != 200 || err != nil || !trap.Failed || trap.Summary.Faults["trap"] != 1 ||
		len(trap.Results) != 1 || trap.Results[0].ID != "web:m2" || trap.Results[0].Outcome != dryrun.Fault || !strings.Contains(trap.Text, "!new fault: guest fault (trap)") {
		t.Fatalf("the trapping module: HTTP %d %s", code, body)
	}
}

// TestDryRunInBrowser picks a module file on the console's dry-run page and
// reads the verdict and the report.
func TestDryRunInBrowser(t *testing.T) {
	roomyDeadline(t)
	base, _ := startConsole(t, echo{})
	dryRunTraffic(t, base)
	echoWasm := cEcho(t)
	faulty := cFaulty(t)
	ctx := browsertest.Tab(t)
	browsertest.Do(t, ctx, "signing in",
		chromedp.Navigate(base+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login-btn")),
		browsertest.WaitCount("#counters .stat", 1))
	browsertest.Do(t, ctx, "dry running the same echo",
		chromedp.Click(chromedp.CSS("#nav-dryrun")),
		chromedp.WaitVisible(chromedp.CSS("#dryrun-module")),
		chromedp.SetUploadFiles(chromedp.CSS("#dryrun-module"), []string{echoWasm}),
		chromedp.Click(chromedp.CSS("#dryrun-btn")),
		browsertest.WaitText("#dryrun-summary", "No change: 2 replayed, 2 identical, 0 changed, 0 new faults"),
		browsertest.WaitText("#dryrun-report", "replayed 2 records with c-echo.wasm"))
	browsertest.Do(t, ctx, "dry running a module that traps",
		chromedp.SetUploadFiles(chromedp.CSS("#dryrun-module"), []string{faulty}),
		chromedp.Click(chromedp.CSS("#dryrun-btn")),
		browsertest.WaitText("#dryrun-summary", "Changed: 2 replayed, 1 identical, 0 changed, 1 new faults"),
		browsertest.WaitText("#dryrun-report", "!new fault: guest fault (trap)"),
		browsertest.WaitText("#dryrun-report", "web:m2"))
}

// TestDryRunAPILimits: a console dry run takes at most maxConsoleRecords
// (the newest) and says so; one past its deadline stops and says so.
func TestDryRunAPILimits(t *testing.T) {
	roomyDeadline(t) // the capped run's: the deadline is tested below, on its own
	base, echoWasm := consoleWithTraffic(t)
	defer func(n int, d time.Duration) { maxConsoleRecords, dryRunDeadline = n, d }(maxConsoleRecords, dryRunDeadline)
	maxConsoleRecords = 1
	var capped DryRun
	code, body := upload(t, base, token, echoWasm)
	if err := json.Unmarshal([]byte(body), &capped); code != 200 || err != nil || capped.Done != 1 || capped.Selected != 1 ||
		!strings.Contains(capped.Text, "limit: the newest 1 records of 2") || !strings.Contains(capped.Text, "limit: records of the last 24h") {
		t.Fatalf("capped: HTTP %d %s", code, body)
	}
	dryRunDeadline = time.Nanosecond
	code, body = upload(t, base, token, echoWasm)
	var stopped DryRun
	if code == 200 {
		if err := json.Unmarshal([]byte(body), &stopped); err != nil || stopped.Stopped != "deadline" || !strings.Contains(stopped.Text, "stopped at its deadline") {
			t.Fatalf("past its deadline: HTTP %d %s", code, body)
		}
	} else if code != http.StatusServiceUnavailable || !strings.Contains(body, "stopped (deadline)") {
		t.Fatalf("past its deadline: HTTP %d %s", code, body)
	}
}

// consoleWithTraffic starts a console on an echo bot told dryRunTraffic and
// builds examples/c-echo: the console and the module its dry runs replay.
func consoleWithTraffic(t *testing.T) (string, []byte) {
	t.Helper()
	base, _ := startConsole(t, echo{})
	dryRunTraffic(t, base)
	echoWasm, err := os.ReadFile(cEcho(t))
	if err != nil {
		t.Fatal(err)
	}
	return base, echoWasm
}

// cEcho builds examples/c-echo, and cFaulty testdata/faulty (an echo that
// traps on "panic"): candidates that compile in milliseconds, where the Go
// guests take tens of seconds under -race.
func cEcho(t *testing.T) string {
	return wasmbuild.C(t, "../../examples/c-echo", "echo.c", "../../guest-sdk/c/botrun.c")
}

func cFaulty(t *testing.T) string {
	return wasmbuild.C(t, "testdata/faulty", "faulty.c", "../../../../guest-sdk/c/botrun.c")
}

// roomyDeadline gives t's dry runs a deadline a loaded machine compiling a Go
// guest under -race cannot reach (the 45 s deadline is the console's, not
// what these tests are about).
func roomyDeadline(t *testing.T) {
	d := dryRunDeadline
	dryRunDeadline = 10 * time.Minute
	t.Cleanup(func() { dryRunDeadline = d })
}
