// Package bench measures bots on the real path: a server process started on
// its own, driven over HTTP through the webchat API by many concurrent senders
// over many chats, counted until every reply is in its chat's transcript.
// The same driver runs botrun and its peers (bench/river: the echo bot built
// on River), so their figures compare.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Load is one run of traffic.
type Load struct {
	// URL is the server's base URL (http://127.0.0.1:8080); Provider the
	// webchat provider id.
	URL, Provider string
	// Messages are sent over Chats chats (message i to chat i % Chats) by
	// Senders concurrent HTTP clients.
	Messages, Chats, Senders int
	// Rate, when set, paces the sends at that many a second (an open loop:
	// each send starts on schedule whatever the earlier ones do); 0 sends as
	// fast as the senders go.
	Rate float64
	// Prefix makes the run's chat and message ids unique.
	Prefix string
	// Deadline bounds the whole run.
	Deadline time.Duration
}

// Result is what a Load measured.
type Result struct {
	Messages int
	// Elapsed runs from the first send to the last reply seen.
	Elapsed time.Duration
	// Refused counts sends answered 429 or 503 and sent again.
	Refused int64
	// Latencies run from the start of each message's POST to its reply
	// appearing in a long poll of its chat, sorted; empty when the chats
	// were too many to hold a long poll open on each.
	Latencies []time.Duration
}

// Rate is messages a second.
func (r Result) Rate() float64 { return float64(r.Messages) / r.Elapsed.Seconds() }

// Quantile returns the q-quantile of the latencies (0 when none).
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	return r.Latencies[min(len(r.Latencies)-1, int(q*float64(len(r.Latencies))))]
}

// maxLongPolls is the most chats a run holds a long poll open on; past it the
// replies are collected by a pool of pollers after the sends, and latencies
// are not measured.
const maxLongPolls = 1000

var client = &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}}

// Run sends the load and waits until every reply is in its transcript.
func (l Load) Run(ctx context.Context) (Result, error) {
	if l.Deadline == 0 {
		l.Deadline = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, l.Deadline)
	defer cancel()
	start := time.Now()
	sent := make([]atomic.Int64, l.Messages) // ns since start; 0: not yet
	expect := make([]int, l.Chats)
	for i := range l.Messages {
		expect[i%l.Chats]++
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		last      time.Time
		refused   atomic.Int64
		firstErr  error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	replied := make([]bool, l.Messages)
	// seen counts a chat's new replies; a reply that is not one of this
	// run's, or a second reply to a message, fails the run.
	seen := func(chat string, entries []entry, measure bool) (int, error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		last = now
		for _, e := range entries {
			i, err := strconv.Atoi(strings.TrimPrefix(e.Text, "echo: m"))
			if err != nil || i < 0 || i >= l.Messages || !strings.HasSuffix(chat, fmt.Sprintf("-c%d", i%l.Chats)) {
				return 0, fmt.Errorf("chat %s: reply %q (seq %d) answers no message of this run", chat, e.Text, e.Seq)
			}
			if replied[i] {
				return 0, fmt.Errorf("chat %s: message m%d answered twice (seq %d)", chat, i, e.Seq)
			}
			replied[i] = true
			if at := sent[i].Load(); measure && at > 0 {
				latencies = append(latencies, now.Sub(start.Add(time.Duration(at))))
			}
		}
		return len(entries), nil
	}
	chat := func(c int) string { return fmt.Sprintf("%s-c%d", l.Prefix, c) }
	var polls sync.WaitGroup
	longPolls := l.Chats <= maxLongPolls
	if longPolls {
		for c := range l.Chats {
			polls.Go(func() {
				if err := l.collect(ctx, chat(c), expect[c], func(es []entry) (int, error) { return seen(chat(c), es, true) }); err != nil {
					fail(err)
				}
			})
		}
	}
	post := func(i int) {
		sent[i].Store(int64(max(time.Since(start), 1)))
		if err := l.post(ctx, chat(i%l.Chats), fmt.Sprintf("%s-%d", l.Prefix, i), fmt.Sprintf("m%d", i), &refused); err != nil {
			fail(err)
		}
	}
	var sends sync.WaitGroup
	if l.Rate > 0 {
		interval := time.Duration(float64(time.Second) / l.Rate)
		for i := range l.Messages {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil {
				break
			}
			sends.Go(func() { post(i) })
		}
	} else {
		var next atomic.Int64
		for range l.Senders {
			sends.Go(func() {
				for ctx.Err() == nil {
					i := int(next.Add(1) - 1)
					if i >= l.Messages {
						return
					}
					post(i)
				}
			})
		}
	}
	sends.Wait()
	if !longPolls {
		var next atomic.Int64
		for range 64 {
			polls.Go(func() {
				for ctx.Err() == nil {
					c := int(next.Add(1) - 1)
					if c >= l.Chats {
						return
					}
					if err := l.collect(ctx, chat(c), expect[c], func(es []entry) (int, error) { return seen(chat(c), es, false) }); err != nil {
						fail(err)
					}
				}
			})
		}
	}
	polls.Wait()
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return Result{}, firstErr
	}
	slices.Sort(latencies)
	return Result{Messages: l.Messages, Elapsed: last.Sub(start), Refused: refused.Load(), Latencies: latencies}, nil
}

type entry struct {
	Seq  int64  `json:"seq"`
	Text string `json:"text"`
}

// collect long-polls chat's transcript until want replies are in it.
func (l Load) collect(ctx context.Context, chat string, want int, seen func([]entry) (int, error)) error {
	var after int64
	for got := 0; got < want; {
		url := fmt.Sprintf("%s/webchat/%s/messages?chat=%s&after=%d&wait=20s", l.URL, l.Provider, chat, after)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("chat %s: %d of %d replies: %w", chat, got, want, err)
		}
		var page struct {
			Messages []entry `json:"messages"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("chat %s: GET answered %s", chat, resp.Status)
		}
		if err != nil {
			return fmt.Errorf("chat %s: GET answered no transcript: %w", chat, err)
		}
		if len(page.Messages) > 0 {
			after = page.Messages[len(page.Messages)-1].Seq
			n, err := seen(page.Messages)
			if err != nil {
				return err
			}
			got += n
		}
	}
	return nil
}

// post sends one message, again while the server refuses it for now (429,
// 503), as a channel redelivers.
func (l Load) post(ctx context.Context, chat, id, text string, refused *atomic.Int64) error {
	body, _ := json.Marshal(map[string]string{"chat": chat, "from": chat, "id": id, "text": text})
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, l.URL+"/webchat/"+l.Provider+"/messages", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("POST %s: %w", id, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK, http.StatusAccepted:
			return nil
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			refused.Add(1)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		default:
			return fmt.Errorf("POST %s: %s: %s", id, resp.Status, msg)
		}
	}
}
