package discord

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/discord/internal/ratelimit"
	"github.com/botrun/botrun/host/channel/discord/internal/wire"
)

// userAgent is the User-Agent Discord asks bots to send.
const userAgent = "DiscordBot (https://github.com/botrun/botrun, 1)"

// request is one REST call.
type request struct {
	method string
	// path is under /api/v10.
	path string
	// route names the rate-limit bucket and the call in errors; it never
	// holds a token.
	route string
	body  any
	// auth sends the bot token; interaction calls authenticate by the
	// interaction token in their path instead.
	auth bool
	// secret is the interaction token in path, redacted from errors.
	secret string
}

// call makes a REST call and decodes a 2xx JSON answer into out (nil for
// none). A non-2xx answer is mapped onto the taxonomy (apiError).
func (p *Provider) call(ctx context.Context, r request, out any) error {
	if err := p.limits.Wait(ctx, r.route); err != nil {
		return fmt.Errorf("discord %s: %s: %w", p.cfg.ID, r.route, err)
	}
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return fmt.Errorf("discord %s: %s: %w", p.cfg.ID, r.route, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, p.cfg.APIURL+apiPath+r.path, body)
	if err != nil {
		return fmt.Errorf("discord %s: %s: %s", p.cfg.ID, r.route, p.redact(err, r.secret))
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", userAgent)
	if r.auth {
		req.Header.Set("Authorization", "Bot "+p.cfg.Token)
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return fmt.Errorf("discord %s: %s: %s", p.cfg.ID, r.route, p.redact(err, r.secret))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("discord %s: %s: reading the answer: %s", p.cfg.ID, r.route, p.redact(err, r.secret))
	}
	p.limits.Update(r.route, resp.Header)
	if resp.StatusCode/100 != 2 {
		return p.apiError(r.route, resp.StatusCode, resp.Header, data)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("discord %s: %s: HTTP %d with an unreadable body", p.cfg.ID, r.route, resp.StatusCode)
		}
	}
	return nil
}

// APIError is Discord's JSON error body.
type APIError struct {
	Code       int             `json:"code"`
	Message    string          `json:"message"`
	RetryAfter float64         `json:"retry_after"`
	Global     bool            `json:"global"`
	Errors     json.RawMessage `json:"errors"`
}

// contentTooLong reports whether a 50035's errors name the content's
// length (a component's label too long is invalid content instead).
func (e APIError) contentTooLong() bool {
	var fields map[string]json.RawMessage
	json.Unmarshal(e.Errors, &fields)
	return bytes.Contains(fields["content"], []byte("BASE_TYPE_MAX_LENGTH"))
}

// errInteractionGone is wrapped by an error on an interaction token that
// Discord no longer knows (it lives 15 minutes).
var errInteractionGone = errors.New("the interaction token expired")

// The JSON error codes botrun maps (channels.md section 7, and Discord's
// list of JSON error codes).
const (
	codeUnknownChannel      = 10003
	codeUnknownMessage      = 10008
	codeUnknownUser         = 10013
	codeUnknownWebhook      = 10015
	codeUnknownInteraction  = 10062
	codeTooLarge            = 40005
	codeMissingAccess       = 50001
	codeEmptyMessage        = 50006
	codeCannotDM            = 50007
	codeMissingPermissions  = 50013
	codeInvalidWebhookToken = 50027
	codeInvalidForm         = 50035
)

// apiError maps a non-2xx answer onto the taxonomy.
func (p *Provider) apiError(route string, status int, h http.Header, body []byte) error {
	var e APIError
	json.Unmarshal(body, &e) // an unreadable body leaves the status to decide
	cause := fmt.Errorf("discord %s: %s: HTTP %d: %d %s", p.cfg.ID, route, status, e.Code, e.Message)
	switch {
	case status == http.StatusTooManyRequests:
		wait := ratelimit.RetryAfter(e.RetryAfter, h)
		p.limits.Limited(route, wait, e.Global || h.Get("X-RateLimit-Global") == "true")
		return &channel.RateLimitedError{RetryAfter: wait, Err: cause}
	case e.Code == codeUnknownWebhook, e.Code == codeUnknownInteraction, e.Code == codeInvalidWebhookToken:
		return &channel.PermanentError{Err: fmt.Errorf("%w: %w", errInteractionGone, cause)}
	case e.Code == codeUnknownChannel, e.Code == codeUnknownUser, e.Code == codeCannotDM,
		e.Code == codeMissingAccess, e.Code == codeMissingPermissions:
		return fmt.Errorf("%w: %w", channel.ErrRecipientUnreachable, cause)
	case e.Code == codeTooLarge, status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case e.Code == codeInvalidForm && e.contentTooLong():
		return fmt.Errorf("%w: %w", channel.ErrPayloadTooLarge, cause)
	case e.Code == codeInvalidForm, e.Code == codeEmptyMessage, status == http.StatusBadRequest:
		return fmt.Errorf("%w: %w", channel.ErrUnsupportedContent, cause)
	case status == http.StatusUnauthorized, status == http.StatusForbidden, status == http.StatusNotFound:
		return &channel.PermanentError{Err: cause}
	}
	return cause
}

// nonce is a send's Discord nonce: 24 hex digits of its key's SHA-256
// (Discord takes at most 25 characters), the same on every attempt.
func nonce(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:12])
}

// sent is the part of a created message botrun reads.
type sent struct {
	ID string `json:"id"`
}

// Send implements channel.Provider. A handler's reply to an interaction goes
// out as the interaction's follow-up while its token lives; any other send,
// and a reply whose token expired, as a channel message with a nonce derived
// from the send's key (enforce_nonce: Discord answers a repeated nonce with
// the first message, for a few minutes). Buttons and lists are components;
// what Discord cannot show fails with channel.ErrUnsupportedContent before
// any request.
func (p *Provider) Send(ctx context.Context, msg channel.Outbound) (string, error) {
	if !wire.Snowflake(msg.Chat) {
		return "", fmt.Errorf("%w: discord chat %q is not a channel id", channel.ErrRecipientUnreachable, msg.Chat)
	}
	body, err := wire.MessageBody(msg)
	if err != nil {
		return "", fmt.Errorf("discord %s: %w", p.cfg.ID, err)
	}
	if iid, tok, ok := p.interactionOf(ctx, msg); ok {
		ref, err := p.sendFollowUp(ctx, iid, tok, body)
		if !errors.Is(err, errInteractionGone) {
			return ref, err
		}
		p.Log.Info("discord: the interaction token expired; the reply goes as a channel message", "provider", p.cfg.ID, "interaction", iid)
	}
	if msg.Key != "" {
		body.Nonce, body.EnforceNonce = nonce(msg.Key), true
	}
	var out sent
	err = p.call(ctx, request{method: http.MethodPost, path: "/channels/" + msg.Chat + "/messages",
		route: "POST /channels/" + msg.Chat + "/messages", body: body, auth: true}, &out)
	if err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", fmt.Errorf("discord %s: the answer has no message id", p.cfg.ID)
	}
	return out.ID, nil
}

// interactionOf finds the interaction a send answers: its key is derived
// from the event ("<provider id>:<interaction id>:<n>", see host's sendSpec)
// and the interaction's token is still known, for the same channel.
func (p *Provider) interactionOf(ctx context.Context, msg channel.Outbound) (iid, token string, ok bool) {
	rest, ok := strings.CutPrefix(msg.Key, p.cfg.ID+":")
	if !ok {
		return "", "", false
	}
	iid, _, ok = strings.Cut(rest, ":")
	if !ok || !wire.Snowflake(iid) {
		return "", "", false
	}
	rec, ok := p.ix.get(ctx, iid, p.now())
	if !ok || rec.Channel != msg.Chat {
		return "", "", false
	}
	return iid, rec.Token, true
}

// followUpRef is a sent follow-up's interaction, for its edits.
type followUpRef struct {
	iid, token string
	expires    time.Time
}

// sendFollowUp posts body as the follow-up of interaction iid
// (POST /webhooks/{application_id}/{token}); the first one replaces the
// deferred response's "thinking…".
func (p *Provider) sendFollowUp(ctx context.Context, iid, token string, body *wire.OutMessage) (string, error) {
	var out sent
	err := p.call(ctx, request{method: http.MethodPost, path: "/webhooks/" + p.cfg.ApplicationID + "/" + token,
		route: "POST /webhooks/" + p.cfg.ApplicationID + "/" + iid, body: body, secret: token}, &out)
	if err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", fmt.Errorf("discord %s: the follow-up's answer has no message id", p.cfg.ID)
	}
	p.mu.Lock()
	p.followUp[out.ID] = followUpRef{iid: iid, token: token, expires: p.now().Add(tokenLife)}
	p.mu.Unlock()
	return out.ID, nil
}

// purgeFollowUps forgets the follow-ups whose token expired.
func (p *Provider) purgeFollowUps(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, f := range p.followUp {
		if !f.expires.After(now) {
			delete(p.followUp, id)
		}
	}
}

// Edit implements channel.Editor: PATCH /channels/{chat}/messages/{ref}, or
// for a follow-up this process sent while its token lives,
// PATCH /webhooks/{application_id}/{token}/messages/{ref}. Editing to the
// same text succeeds.
func (p *Provider) Edit(ctx context.Context, chat, ref, text string) error {
	if !wire.Snowflake(chat) || !wire.Snowflake(ref) {
		return fmt.Errorf("%w: discord edits channel ids and message ids (numbers), not %q/%q", channel.ErrUnsupportedContent, chat, ref)
	}
	body := map[string]any{"content": text}
	p.mu.Lock()
	f, ok := p.followUp[ref]
	p.mu.Unlock()
	if ok && f.expires.After(p.now()) {
		err := p.call(ctx, request{method: http.MethodPatch, path: "/webhooks/" + p.cfg.ApplicationID + "/" + f.token + "/messages/" + ref,
			route: "PATCH /webhooks/" + p.cfg.ApplicationID + "/" + f.iid + "/messages", body: body, secret: f.token}, nil)
		if !errors.Is(err, errInteractionGone) {
			return err
		}
	}
	return p.call(ctx, request{method: http.MethodPatch, path: "/channels/" + chat + "/messages/" + ref,
		route: "PATCH /channels/" + chat + "/messages", body: body, auth: true}, nil)
}

// Typing implements channel.Typist: POST /channels/{chat}/typing (shown for
// up to 10 seconds, or until the bot's next message).
func (p *Provider) Typing(ctx context.Context, chat, _ string) error {
	if !wire.Snowflake(chat) {
		return fmt.Errorf("%w: discord chat %q is not a channel id", channel.ErrRecipientUnreachable, chat)
	}
	return p.call(ctx, request{method: http.MethodPost, path: "/channels/" + chat + "/typing",
		route: "POST /channels/" + chat + "/typing", auth: true}, nil)
}
