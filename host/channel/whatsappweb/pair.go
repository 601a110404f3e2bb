package whatsappweb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/store"
	"google.golang.org/protobuf/proto"
	"rsc.io/qr"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/kvlease"
	"github.com/botrun/botrun/host/channel/whatsappweb/internal/wamsg"
)

func init() {
	// The name the phone's Settings > Linked devices shows for the device.
	store.DeviceProps.Os = proto.String("botrun")
}

// PairOptions tune Pair.
type PairOptions struct {
	// Out receives the QR codes or the pairing code, and what to do.
	Out io.Writer
	// PNG, when set, is a file each QR code is also written to as an image
	// (for a terminal that cannot show it).
	PNG string
}

// pairLease is the length of the lease a pairing holds.
const pairLease = 30 * time.Second

// ErrPairing is wrapped by every Pair error that pairing again may mend.
var ErrPairing = errors.New("pairing did not complete")

// Pair links a new device to the session of cfg, for `botrun whatsapp
// pair`: it shows each QR code on opts.Out (or, with pair_phone, a code to
// type on the phone) until the phone links the device, records the device
// as the provider's and returns. A session paired already is left as it is.
// No two pairings of a session run at once (they hold a lease). A running
// bot's leader, which looks for a device every UnpairedPoll, connects with
// the new one once it is recorded, after the pairing's connection ended.
func Pair(ctx context.Context, cfg Config, env channel.Env, opts PairOptions) error {
	p, err := Open(cfg, env)
	if err != nil {
		return err
	}
	out := opts.Out
	st, err := p.openStore(ctx)
	if err != nil {
		return fmt.Errorf("whatsapp-web %s: the session store: %w", p.cfg.ID, err)
	}
	defer st.Close()
	if dev, err := st.Device(ctx); err != nil {
		return fmt.Errorf("whatsapp-web %s: reading the session: %w", p.cfg.ID, err)
	} else if dev != nil {
		fmt.Fprintf(out, "whatsapp-web %s: already paired as %s. To link another account, unlink this device on the phone (Settings > Linked devices) first.\n", p.cfg.ID, dev.ID.String())
		return nil
	}
	if env.Kv != nil {
		lease := kvlease.New(env.Kv, p.key("pair"), "", pairLease)
		held, release, err := lease.Hold(ctx, func(holder string) {
			fmt.Fprintf(out, "whatsapp-web %s: another pairing (%s) is under way; waiting\n", p.cfg.ID, holder)
		}, nil)
		if err != nil {
			return err
		}
		defer release()
		ctx = held
	}
	dev := st.NewDevice()
	cli := p.cfg.NewClient(dev, p.waLog("Pair"))
	qrs, err := cli.GetQRChannel(ctx)
	if err != nil {
		return fmt.Errorf("whatsapp-web %s: %w", p.cfg.ID, err)
	}
	if err := cli.ConnectContext(ctx); err != nil {
		return fmt.Errorf("whatsapp-web %s: connecting to WhatsApp: %w", p.cfg.ID, err)
	}
	defer cli.Disconnect()
	phone := ""
	if cfg.PairPhone != "" {
		if phone, err = wamsg.PhoneDigits(cfg.PairPhone); err != nil {
			return err
		}
	}
	codeShown := false
	for {
		var item whatsmeow.QRChannelItem
		var ok bool
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrPairing, ctx.Err())
		case item, ok = <-qrs:
		}
		if !ok {
			return fmt.Errorf("%w: the connection closed", ErrPairing)
		}
		switch {
		case item.Event == whatsmeow.QRChannelEventCode && phone != "":
			if codeShown {
				continue // the pairing code stays valid while the connection lasts
			}
			code, err := cli.PairPhone(ctx, phone, true, whatsmeow.PairClientChrome, "Chrome (Linux)")
			if err != nil {
				return fmt.Errorf("%w: asking for a pairing code for +%s: %w", ErrPairing, phone, err)
			}
			codeShown = true
			fmt.Fprintf(out, "On the phone of +%s: WhatsApp > Settings > Linked devices > Link a device > Link with phone number instead, and enter:\n\n    %s\n\n", phone, code)
		case item.Event == whatsmeow.QRChannelEventCode:
			if err := showQR(out, item.Code, opts.PNG); err != nil {
				return err
			}
			fmt.Fprintf(out, "Scan it with WhatsApp on the phone: Settings > Linked devices > Link a device (a new code every %s).\n", item.Timeout)
		case item.Event == whatsmeow.QRChannelSuccess.Event:
			if dev.ID == nil {
				return fmt.Errorf("%w: WhatsApp reported success without a device id", ErrPairing)
			}
			// The session's leader connects the device once it is
			// recorded: this connection ends first.
			cli.Disconnect()
			if err := st.Paired(ctx, dev); err != nil {
				return fmt.Errorf("whatsapp-web %s: linked as %s, but recording it failed: %w", p.cfg.ID, dev.ID.String(), err)
			}
			fmt.Fprintf(out, "whatsapp-web %s: linked as %s. botrun run connects with it (a running bot does within %s).\n", p.cfg.ID, dev.ID.String(), p.cfg.UnpairedPoll)
			return nil
		case item.Event == whatsmeow.QRChannelTimeout.Event:
			return fmt.Errorf("%w: no phone linked the device before the codes ran out; run the command again", ErrPairing)
		case item.Event == whatsmeow.QRChannelEventError:
			return fmt.Errorf("%w: %w", ErrPairing, item.Error)
		case item.Event == whatsmeow.QRChannelClientOutdated.Event:
			return fmt.Errorf("%w: WhatsApp refuses this client's version: upgrade botrun (its whatsmeow)", ErrPairing)
		case item.Event == whatsmeow.QRChannelScannedWithoutMultidevice.Event:
			return fmt.Errorf("%w: the phone scanned the code without multi-device: update WhatsApp on the phone", ErrPairing)
		default:
			return fmt.Errorf("%w: %s", ErrPairing, item.Event)
		}
	}
}

// showQR draws code on out, two rows of modules per line of half blocks,
// the light modules drawn (right on a dark terminal), with a quiet zone;
// with png set, it writes the image there too.
func showQR(out io.Writer, code, png string) error {
	c, err := qr.Encode(code, qr.L)
	if err != nil {
		return fmt.Errorf("drawing the QR code: %w", err)
	}
	if png != "" {
		if err := os.WriteFile(png, c.PNG(), 0o600); err != nil {
			return fmt.Errorf("writing the QR code image: %w", err)
		}
		fmt.Fprintf(out, "(also written to %s)\n", png)
	}
	fmt.Fprint(out, renderQR(c))
	return nil
}

// renderQR is the code in half blocks.
func renderQR(c *qr.Code) string {
	const quiet = 2
	light := func(x, y int) bool { return !c.Black(x, y) } // outside the code is light too
	var b strings.Builder
	for y := -quiet; y < c.Size+quiet; y += 2 {
		for x := -quiet; x < c.Size+quiet; x++ {
			top, bottom := light(x, y), light(x, y+1)
			switch {
			case top && bottom:
				b.WriteString("█")
			case top:
				b.WriteString("▀")
			case bottom:
				b.WriteString("▄")
			default:
				b.WriteString(" ")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
