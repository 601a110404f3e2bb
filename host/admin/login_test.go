package admin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLiveTailTakesATicketNotTheToken: the live tail refuses the token in
// its URL, where proxies log it (issue 29, item 7); it takes a ticket of
// POST /admin/events/ticket (which needs the token in the header), once.
func TestLiveTailTakesATicketNotTheToken(t *testing.T) {
	_, _, srv := setup(t, token)
	if code, body := call(t, "GET", srv.URL+"/admin/events?token="+token, ""); code != http.StatusUnauthorized || !strings.Contains(body, "POST /admin/events/ticket") {
		t.Fatalf("the token in the URL: HTTP %d %s, want 401 naming the ticket", code, body)
	}
	if code, _ := call(t, "POST", srv.URL+"/admin/events/ticket", ""); code != http.StatusUnauthorized {
		t.Fatalf("a ticket without the token: HTTP %d, want 401", code)
	}
	code, body := call(t, "POST", srv.URL+"/admin/events/ticket", token)
	var tk Ticket
	if err := json.Unmarshal([]byte(body), &tk); code != 200 || err != nil || len(tk.Ticket) != 64 || tk.ExpiresIn != 60 || strings.Contains(body, token) {
		t.Fatalf("a ticket: HTTP %d %s", code, body)
	}
	resp, err := http.Get(srv.URL + "/admin/events?ticket=" + tk.Ticket)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	if resp.StatusCode != 200 || first != "retry: 1000\n" {
		t.Fatalf("the stream with a ticket: HTTP %d %q", resp.StatusCode, first)
	}
	if code, body := call(t, "GET", srv.URL+"/admin/events?ticket="+tk.Ticket, ""); code != http.StatusUnauthorized || !strings.Contains(body, "used or expired") {
		t.Fatalf("a used ticket: HTTP %d %s", code, body)
	}
}

// TestTicketsExpireAndAreBounded: a ticket unused for a minute is refused;
// at most maxTickets are outstanding.
func TestTicketsExpireAndAreBounded(t *testing.T) {
	var ts tickets
	now := time.Now()
	s, err := ts.issue(now)
	if err != nil || ts.redeem(s, now.Add(ticketTTL)) {
		t.Fatalf("a ticket a minute old was taken (err %v)", err)
	}
	for range maxTickets {
		if _, err := ts.issue(now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ts.issue(now); err != errTooManyTickets {
		t.Fatalf("past maxTickets: %v", err)
	}
	if _, err := ts.issue(now.Add(ticketTTL)); err != nil {
		t.Fatalf("once the outstanding ones expired: %v", err)
	}
}

// TestWrongTokensAreThrottledAndLogged: a client that presents wrong tokens
// is answered 429 past ten distinct ones, but the right token still gets in;
// each wrong token is logged with the client's address and the path, never
// the token (issue 29, item 7).
func TestWrongTokensAreThrottledAndLogged(t *testing.T) {
	base, logs := startConsole(t, echo{})
	const guess = "guess-0123456789abcdef"
	for i := range loginBurst {
		if code, _ := call(t, "GET", fmt.Sprintf("%s/admin/inbox?n=%d", base, i), fmt.Sprint(guess, i)); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: HTTP %d, want 401", i+1, code)
		}
	}
	req, _ := http.NewRequest("GET", base+"/admin/inbox", nil)
	req.Header.Set("Authorization", "Bearer "+guess)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("past %d wrong tokens, one more: HTTP %d (Retry-After %q), want 429", loginBurst, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, body := call(t, "GET", base+"/admin/inbox", token); code != http.StatusOK {
		t.Fatalf("past %d wrong tokens, the right one: HTTP %d %s, want 200 (the operator is never locked out)", loginBurst, code, body)
	}
	if code, _ := call(t, "GET", base+"/admin/events?ticket=guessed", ""); code != http.StatusTooManyRequests {
		t.Fatalf("a guessed ticket from a throttled client: HTTP %d, want 429", code)
	}
	b, err := os.ReadFile(logs)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	if n := strings.Count(log, "admin: refused a wrong bearer token"); n != loginBurst || !strings.Contains(log, "remote=127.0.0.1:") || !strings.Contains(log, "path=/admin/inbox") {
		t.Fatalf("%d wrong tokens logged, want %d with the address and path:\n%s", n, loginBurst, log)
	}
	if strings.Contains(log, guess) || strings.Contains(log, token) {
		t.Fatalf("a token in the log:\n%s", log)
	}
}

// TestAStaleTokenCountsOnce: a scraper left with a rotated-out token,
// presenting it again and again, is refused 401 each time but never
// throttled: the same wrong token counts once.
func TestAStaleTokenCountsOnce(t *testing.T) {
	base, _ := startConsole(t, echo{})
	for i := range 3 * loginBurst {
		if code, _ := call(t, "GET", base+"/admin/inbox", "rotated-out-token"); code != http.StatusUnauthorized {
			t.Fatalf("the stale token, time %d: HTTP %d, want 401", i+1, code)
		}
	}
}

// TestLoginAllowanceIsPerClientAndBounded: one client's wrong tokens do not
// throttle another; the allowance refills; the table of clients is bounded,
// and clients past it do not share an allowance: a flood of clients filling
// the table throttles no new one.
func TestLoginAllowanceIsPerClientAndBounded(t *testing.T) {
	var l logins
	now := time.Now()
	for i := range loginBurst {
		l.fail("192.0.2.1", fmt.Sprint("guess", i), now)
	}
	if l.wait("192.0.2.1", now) <= 0 || l.wait("192.0.2.2", now) != 0 {
		t.Fatal("the allowance is not per client")
	}
	if l.wait("192.0.2.1", now.Add(loginRefill)) != 0 {
		t.Fatal("the allowance did not refill")
	}
	for i := range 2 * maxLoginClients {
		client := fmt.Sprintf("2001:db8:0:%x::/64", i)
		for j := range loginBurst {
			l.fail(client, fmt.Sprint("guess", j), now)
		}
	}
	if len(l.clients) > maxLoginClients {
		t.Fatalf("%d clients kept, want at most %d", len(l.clients), maxLoginClients)
	}
	l.fail("192.0.2.3", "a typo", now)
	if w := l.wait("192.0.2.3", now); w != 0 {
		t.Fatalf("a new client with one wrong token, past a full table: wait %v, want 0", w)
	}
}
