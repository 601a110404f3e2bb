package whatsappweb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.mau.fi/whatsmeow/types/events"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/whatsappweb/internal/devstore"
	"github.com/botrun/botrun/host/channel/whatsappweb/internal/wamsg"
)

// openStore opens the session's device store (internal/devstore).
func (p *Provider) openStore(ctx context.Context) (*devstore.Store, error) {
	return devstore.Open(ctx, p.cfg.Store, p.env.Kv, p.key("device"), p.waLog("Database"))
}

// Session outcomes: why a session ended, and how long to wait before the
// next.
type ending struct {
	reason string
	wait   time.Duration
}

// RunSession implements channel.SessionRunner: one connection after
// another until ctx ends, which the host ends when this process stops
// leading the session. A connection loads the paired device, connects and
// stays connected (whatsmeow reconnects by itself) until it is logged out,
// replaced, banned, or ctx ends. An unpaired session is logged once and
// looked at again every UnpairedPoll; the bot's other channels never wait
// on it. fence is checked right before each message is journaled and each
// send.
func (p *Provider) RunSession(ctx context.Context, fence channel.Fence) {
	p.mu.Lock()
	p.fence = fence
	p.mu.Unlock()
	var st *devstore.Store
	defer func() {
		if st != nil {
			st.Close()
		}
	}()
	backoff := time.Second
	failed := func(what string, err error) {
		if ctx.Err() == nil {
			p.log.Error("whatsapp-web: "+what+" failed; trying again", "provider", p.cfg.ID, "err", err, "wait", backoff)
			sleep(ctx, backoff)
			backoff = min(2*backoff, 5*time.Minute)
		}
	}
	unpairedLogged := false
	for ctx.Err() == nil {
		if st == nil {
			var err error
			if st, err = p.openStore(ctx); err != nil {
				failed("opening the session store", err)
				continue
			}
		}
		dev, err := st.Device(ctx)
		if err != nil {
			failed("reading the session", err)
			continue
		}
		if dev == nil {
			if !unpairedLogged {
				p.log.Warn(p.notPairedLine(), "provider", p.cfg.ID)
				unpairedLogged = true
			}
			sleep(ctx, p.cfg.UnpairedPoll)
			continue
		}
		unpairedLogged = false
		end := p.session(ctx, st)
		if ctx.Err() != nil {
			return
		}
		if end.reason == "connect failed" {
			end.wait = max(end.wait, backoff)
			backoff = min(2*backoff, 5*time.Minute)
		} else {
			backoff = time.Second
		}
		if end.wait > 0 {
			p.log.Info("whatsapp-web: next session", "provider", p.cfg.ID, "after", end.reason, "wait", end.wait)
		}
		sleep(ctx, end.wait)
	}
}

// session runs one connection of the paired device until ctx ends.
func (p *Provider) session(ctx context.Context, st *devstore.Store) ending {
	_, token := p.fenceHeld()
	// The device may have been unlinked since the last look.
	dev, err := st.Device(ctx)
	if err != nil || dev == nil {
		return ending{reason: "not paired"}
	}
	jid := *dev.ID
	log := p.log.With("provider", p.cfg.ID, "device", jid.String(), "lease_token", token)
	cli := p.cfg.NewClient(dev, p.waLog("Client"))
	ended := make(chan ending, 1)
	end := func(e ending) {
		select {
		case ended <- e:
		default:
		}
	}
	redeliver := make(chan struct{}, 1)
	h := &handler{p: p, ctx: ctx, log: log, end: end, redeliver: redeliver}
	id := cli.AddEventHandlerWithSuccessStatus(func(evt any) (handled bool) {
		// A panic skips the event (acknowledged, as whatsmeow's own
		// recovery would), logged and counted.
		if err := p.env.Guard(eventName(evt), func() error { handled = h.handle(evt); return nil }); err != nil {
			return true
		}
		return handled
	})
	defer cli.RemoveEventHandler(id)
	log.Info("whatsapp-web: connecting")
	if err := cli.ConnectContext(ctx); err != nil {
		log.Error("whatsapp-web: connecting failed", "err", err)
		return ending{reason: "connect failed", wait: time.Second}
	}
	p.setClient(cli)
	defer func() {
		p.setClient(nil)
		cli.Disconnect()
		log.Info("whatsapp-web: disconnected")
	}()
	for {
		select {
		case <-ctx.Done():
			return ending{reason: "stopped"}
		case e := <-ended:
			if e.reason == "logged out" {
				if err := st.Forget(context.WithoutCancel(ctx), jid); err != nil {
					log.Warn("whatsapp-web: forgetting the logged-out device failed", "err", err)
				}
			}
			return e
		case <-redeliver:
			// A message the journal refused was not acknowledged: WhatsApp
			// delivers what is unacknowledged again on a new connection.
			if !sleep(ctx, p.cfg.RedeliverAfter) {
				continue
			}
			log.Info("whatsapp-web: reconnecting so WhatsApp delivers the unjournaled message again")
			cli.Disconnect()
			if err := cli.ConnectContext(ctx); err != nil {
				log.Error("whatsapp-web: reconnecting failed", "err", err)
				return ending{reason: "connect failed", wait: time.Second}
			}
		}
	}
}

// handler is one session's whatsmeow event handler.
type handler struct {
	p         *Provider
	ctx       context.Context
	log       *slog.Logger
	end       func(ending)
	redeliver chan struct{}
}

// eventName names evt for the log of a panic on it: its type, and a
// message's id (never its content), so an operator can find it.
func eventName(evt any) string {
	if m, ok := evt.(*events.Message); ok {
		return fmt.Sprintf("taking message %s", m.Info.ID)
	}
	return fmt.Sprintf("taking an event %T", evt)
}

// handle receives every whatsmeow event; false leaves a message
// unacknowledged.
func (h *handler) handle(evt any) bool {
	p, log := h.p, h.log
	switch e := evt.(type) {
	case *events.Message:
		return h.message(e)
	case *events.MediaRetry:
		p.mediaRetried(e)
	case *events.UndecryptableMessage:
		log.Warn("whatsapp-web: a message could not be decrypted; WhatsApp is asked to send it again", "id", e.Info.ID, "chat", e.Info.Chat.String())
	case *events.Connected:
		log.Info("whatsapp-web: connected")
	case *events.Disconnected:
		log.Warn("whatsapp-web: connection lost; reconnecting")
	case *events.KeepAliveTimeout:
		log.Warn("whatsapp-web: keepalive timed out", "errors", e.ErrorCount, "last_success", e.LastSuccess)
	case *events.KeepAliveRestored:
		log.Info("whatsapp-web: keepalive restored")
	case *events.StreamError:
		log.Warn("whatsapp-web: stream error", "code", e.Code)
	case *events.ConnectFailure:
		// whatsmeow does not reconnect after this one: a new session will.
		log.Error("whatsapp-web: WhatsApp refused the connection; trying again in a minute", "reason", e.Reason.String(), "message", e.Message)
		h.end(ending{reason: "connection refused", wait: time.Minute})
	case *events.CATRefreshError:
		log.Error("whatsapp-web: refreshing the client token failed; trying again in a minute", "err", e.Error)
		h.end(ending{reason: "client token", wait: time.Minute})
	case *events.LoggedOut:
		msg := fmt.Sprintf("whatsapp-web %s: logged out (%s): the device was unlinked; pair it again with %s", p.cfg.ID, e.Reason.String(), p.pairCommand())
		log.Error(msg)
		p.env.RaiseAlert(AlertLoggedOut, msg)
		h.end(ending{reason: "logged out"})
	case *events.StreamReplaced:
		msg := fmt.Sprintf("whatsapp-web %s: another connection took this session over (the same keys in use elsewhere); reconnecting in 5 minutes", p.cfg.ID)
		log.Error(msg)
		p.env.RaiseAlert(AlertReplaced, msg)
		h.end(ending{reason: "replaced", wait: 5 * time.Minute})
	case *events.TemporaryBan:
		msg := fmt.Sprintf("whatsapp-web %s: temporarily banned (%s) for %s", p.cfg.ID, e.Code.String(), e.Expire)
		log.Error(msg)
		p.env.RaiseAlert(AlertBanned, msg)
		h.end(ending{reason: "banned", wait: max(e.Expire, time.Minute)})
	case *events.ClientOutdated:
		msg := fmt.Sprintf("whatsapp-web %s: WhatsApp refuses this client's version: upgrade botrun (its whatsmeow)", p.cfg.ID)
		log.Error(msg)
		p.env.RaiseAlert(AlertBanned, msg)
		h.end(ending{reason: "client outdated", wait: time.Hour})
	case *events.PairSuccess:
		log.Info("whatsapp-web: paired", "jid", e.ID.String())
	}
	return true
}

// message journals one inbound message; it returns false (no
// acknowledgement) when the journal did not take it.
func (h *handler) message(e *events.Message) bool {
	p := h.p
	msg, skip := wamsg.Decode(e, p.cfg.Groups, p.cfg.DurableViewOnce)
	if skip != "" {
		h.log.Debug("whatsapp-web: message ignored", "id", e.Info.ID, "why", skip)
		return true
	}
	if err := p.leaseHeld(); err != nil {
		// Not acknowledged: WhatsApp delivers it again to the session's
		// holder.
		h.log.Warn("whatsapp-web: message not journaled; not acknowledged", "id", e.Info.ID, "err", err)
		return false
	}
	if _, err := p.admit.Admit(h.ctx, p.cfg.ID, msg); err != nil {
		if errors.Is(err, channel.ErrInvalidMessage) {
			h.log.Warn("whatsapp-web: message refused for good; acknowledged", "id", e.Info.ID, "err", err)
			return true
		}
		h.log.Warn("whatsapp-web: message not journaled; not acknowledged, so WhatsApp delivers it again", "id", e.Info.ID, "err", err)
		select {
		case h.redeliver <- struct{}{}:
		default:
		}
		return false
	}
	p.seen(e)
	return true
}

// waLog is whatsmeow's logger writing to the provider's: its warnings and
// errors; its info lines at debug; its debug lines (whole protocol nodes)
// never.
func (p *Provider) waLog(module string) waLog.Logger {
	return waLogger{log: p.log.With("provider", p.cfg.ID, "module", module)}
}

type waLogger struct{ log *slog.Logger }

func (l waLogger) Errorf(msg string, args ...any) {
	l.log.Error("whatsmeow: " + fmt.Sprintf(msg, args...))
}
func (l waLogger) Warnf(msg string, args ...any) {
	l.log.Warn("whatsmeow: " + fmt.Sprintf(msg, args...))
}
func (l waLogger) Infof(msg string, args ...any) {
	l.log.Debug("whatsmeow: " + fmt.Sprintf(msg, args...))
}
func (l waLogger) Debugf(string, ...any)          {}
func (l waLogger) Sub(module string) waLog.Logger { return waLogger{log: l.log.With("sub", module)} }
