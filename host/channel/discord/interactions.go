package discord

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/discord/internal/wire"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// The headers that sign an interaction webhook.
const (
	SignatureHeader = "X-Signature-Ed25519"
	TimestampHeader = "X-Signature-Timestamp"
)

// Sign returns the X-Signature-Ed25519 value of a webhook body at timestamp,
// as Discord signs it (tests, and a gateway of one's own).
func Sign(key ed25519.PrivateKey, timestamp string, body []byte) string {
	return hex.EncodeToString(ed25519.Sign(key, append([]byte(timestamp), body...)))
}

// SignatureWindow is how far an interaction's signed timestamp may be from
// botrun's clock: a captured request cannot be replayed later (after its
// inbox record is purged, or its token expired).
const SignatureWindow = 5 * time.Minute

// verified reports whether the request's Ed25519 signature over timestamp +
// body is the application's, signed within SignatureWindow of now.
func (p *Provider) verified(h http.Header, body []byte) bool {
	sig, err := hex.DecodeString(h.Get(SignatureHeader))
	ts := h.Get(TimestampHeader)
	if err != nil || len(sig) != ed25519.SignatureSize || p.pub == nil {
		return false
	}
	at, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || p.now().Sub(time.Unix(at, 0)).Abs() > SignatureWindow {
		return false
	}
	return ed25519.Verify(p.pub, append([]byte(ts), body...), sig)
}

// webhook is the Interactions Endpoint URL: verify, decode, then PING →
// PONG, a command or a press → journaled, then a deferred response.
func (p *Provider) webhook(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(SignatureHeader) == "" || r.Header.Get(TimestampHeader) == "" {
		http.Error(w, "missing "+SignatureHeader, http.StatusUnauthorized)
		return
	}
	body, ok := httpkit.ReadWebhook(w, r, MaxBody)
	if !ok {
		return
	}
	if !p.verified(r.Header, body) {
		http.Error(w, "bad or missing "+SignatureHeader, http.StatusUnauthorized)
		return
	}
	ix, err := wire.DecodeInteraction(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var answer any
	switch ix.Type {
	case wire.InteractionPing:
		answer = map[string]int{"type": wire.CallbackPong}
	case wire.InteractionAutocomplete:
		// botrun registers no autocomplete: no suggestions.
		answer = map[string]any{"type": wire.CallbackAutocomplete, "data": map[string]any{"choices": []any{}}}
	case wire.InteractionCommand, wire.InteractionComponent:
		cb, err := p.interaction(r.Context(), ix)
		if err != nil {
			// Discord does not redeliver: the user sees the interaction
			// fail and may try again.
			httpkit.NotAdmitted(w.Header(), err)
			http.Error(w, "not admitted: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		answer = map[string]int{"type": cb}
	default:
		http.Error(w, fmt.Sprintf("interaction type %d is not handled", ix.Type), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

// interaction keeps a command's or a press's token, admits it, and returns
// the deferred response to answer it with: 5 (a message follows) for a
// command, 6 (the message stays) for a press. An error is an admission or a
// store error: the interaction must not be acknowledged.
func (p *Provider) interaction(ctx context.Context, ix wire.Interaction) (int, error) {
	cb := wire.CallbackDeferredMessage
	if ix.Type == wire.InteractionComponent {
		cb = wire.CallbackDeferredUpdate
	}
	msg, ok := ix.Inbound()
	if !ok {
		return cb, nil // a bot's, or without an id: acknowledged and ignored
	}
	rec := tokenRecord{Token: ix.Token, Channel: ix.ChannelID, Expires: tokenExpiry(ix.ID, p.now()).UnixMilli()}
	if err := p.ix.put(ctx, ix.ID, rec); err != nil {
		return 0, fmt.Errorf("discord %s: keeping the interaction token: %w", p.cfg.ID, err)
	}
	if _, err := p.Admitter.Admit(ctx, p.cfg.ID, msg); err != nil && !errors.Is(err, channel.ErrInvalidMessage) {
		return 0, err
	}
	return cb, nil
}

// ackTimeout bounds an interaction callback: Discord waits 3 seconds.
const ackTimeout = 3 * time.Second

// acknowledge answers an interaction that came over the Gateway
// (POST /interactions/{id}/{token}/callback), once it is admitted. It is best
// effort: a replayed interaction was answered already (40060), and a failure
// only shows the user "interaction failed".
func (p *Provider) acknowledge(ctx context.Context, ix wire.Interaction, cb int) {
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	err := p.call(ctx, request{method: http.MethodPost, path: "/interactions/" + ix.ID + "/" + ix.Token + "/callback",
		route: "POST /interactions/" + ix.ID + "/callback", body: map[string]int{"type": cb}, secret: ix.Token}, nil)
	if err != nil {
		p.Log.Warn("discord: acknowledging an interaction failed", "provider", p.cfg.ID, "interaction", ix.ID, "err", err)
	}
}

// tokenLife is how long botrun uses an interaction token: Discord's 15
// minutes, less a margin for the request.
const tokenLife = 14 * time.Minute

// discordEpoch is the Unix millisecond a snowflake's timestamp counts from.
const discordEpoch = 1420070400000

// tokenExpiry is when an interaction's token stops being used: tokenLife
// after the interaction was created (its id's timestamp), or after now when
// that is later (a skewed clock).
func tokenExpiry(id string, now time.Time) time.Time {
	created := now
	if n, err := strconv.ParseUint(id, 10, 64); err == nil {
		if t := time.UnixMilli(int64(n>>22) + discordEpoch); t.Before(now) {
			created = t
		}
	}
	return created.Add(tokenLife)
}

// tokenRecord is a kept interaction token.
type tokenRecord struct {
	Token   string `json:"token"`
	Channel string `json:"channel"`
	// Expires is when botrun stops using it, in Unix milliseconds.
	Expires int64 `json:"exp"`
}

// tokens keeps interaction tokens by interaction id until they expire: in
// memory, and in the backend's Kv when it has one (under
// "<KeyPrefix>discord/<id>/ix/", ordered by expiry for the purge), so a reply
// replayed after a restart still goes out as the follow-up. A token is a
// credential for its interaction only, lives 15 minutes and is never logged.
type tokens struct {
	kv    durability.Kv
	group string

	mu  sync.Mutex
	mem map[string]tokenRecord
}

func newTokens(kv durability.Kv, group string) *tokens {
	return &tokens{kv: kv, group: group, mem: map[string]tokenRecord{}}
}

// put keeps iid's token; it returns once the Kv has it.
func (t *tokens) put(ctx context.Context, iid string, r tokenRecord) error {
	t.mu.Lock()
	t.mem[iid] = r
	t.mu.Unlock()
	if t.kv == nil {
		return nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	exp := r.Expires
	return t.kv.Commit(ctx, []durability.Write{{Key: t.group + iid, Version: durability.AnyVersion, Value: b, Group: t.group, Order: &exp}})
}

// get returns iid's token while it lives.
func (t *tokens) get(ctx context.Context, iid string, now time.Time) (tokenRecord, bool) {
	t.mu.Lock()
	r, ok := t.mem[iid]
	t.mu.Unlock()
	if !ok && t.kv != nil {
		b, v, err := t.kv.Get(ctx, t.group+iid)
		if err == nil && v != 0 && json.Unmarshal(b, &r) == nil && r.Token != "" {
			ok = true
			t.mu.Lock()
			t.mem[iid] = r
			t.mu.Unlock()
		}
	}
	return r, ok && r.Expires > now.UnixMilli()
}

// purgeBatch is how many expired tokens one Kv commit deletes.
const purgeBatch = 500

// purge forgets the tokens expired at now.
func (t *tokens) purge(ctx context.Context, now time.Time) {
	t.mu.Lock()
	for id, r := range t.mem {
		if r.Expires <= now.UnixMilli() {
			delete(t.mem, id)
		}
	}
	t.mu.Unlock()
	if t.kv == nil {
		return
	}
	for ctx.Err() == nil {
		old, err := t.kv.Range(ctx, t.group, durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, now.UnixMilli(), purgeBatch)
		if err != nil || len(old) == 0 {
			return
		}
		writes := make([]durability.Write, len(old))
		for i, e := range old {
			writes[i] = durability.Write{Key: e.Key, Version: durability.AnyVersion, Delete: true, Group: t.group}
		}
		if t.kv.Commit(ctx, writes) != nil || len(old) < purgeBatch {
			return
		}
	}
}
