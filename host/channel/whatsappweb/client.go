package whatsappweb

import (
	"context"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	waLog "go.mau.fi/whatsmeow/util/log"

	"github.com/botrun/botrun/host/channel/whatsappweb/internal/wamsg"
)

// Client is the seam between the adapter and the network: the wamsg.Part of
// *whatsmeow.Client the channel uses, with whatsmeow's own types. Production
// uses whatsmeow's client (NewWhatsmeow); tests use a fake
// (whatsappwebtest) that takes the same calls and emits the same events.
// Everything else (events to messages, sends to protobuf messages, the error
// mapping, media references, the session loop, pairing) is the adapter's
// code and runs unchanged in the tests.
type Client interface {
	// ConnectContext opens the WebSocket; ctx bounds the connection's life.
	ConnectContext(ctx context.Context) error
	Disconnect()
	IsLoggedIn() bool
	// AddEventHandlerWithSuccessStatus registers h; a message whose
	// handler returns false is not acknowledged (WhatsApp delivers it again).
	AddEventHandlerWithSuccessStatus(h whatsmeow.EventHandlerWithSuccessStatus) uint32
	RemoveEventHandler(id uint32) bool

	SendMessage(ctx context.Context, to types.JID, msg *waE2E.Message, extra ...whatsmeow.SendRequestExtra) (whatsmeow.SendResponse, error)
	Upload(ctx context.Context, plaintext []byte, mediaType whatsmeow.MediaType) (whatsmeow.UploadResponse, error)
	Download(ctx context.Context, msg whatsmeow.DownloadableMessage) ([]byte, error)
	SendMediaRetryReceipt(ctx context.Context, info *types.MessageInfo, mediaKey []byte) error
	MarkRead(ctx context.Context, ids []types.MessageID, timestamp time.Time, chat, sender types.JID, receiptTypeExtra ...types.ReceiptType) error
	SendPresence(ctx context.Context, state types.Presence) error
	SendChatPresence(ctx context.Context, jid types.JID, state types.ChatPresence, media types.ChatPresenceMedia) error
	IsOnWhatsApp(ctx context.Context, phones []string) ([]types.IsOnWhatsAppResponse, error)

	// Pairing: GetQRChannel before ConnectContext; PairPhone after the
	// first QR code.
	GetQRChannel(ctx context.Context) (<-chan whatsmeow.QRChannelItem, error)
	PairPhone(ctx context.Context, phone string, showPushNotification bool, clientType whatsmeow.PairClientType, clientDisplayName string) (string, error)
}

// NewClientFunc builds the client of a device store.
type NewClientFunc func(dev *store.Device, log waLog.Logger) Client

var _ Client = (*whatsmeow.Client)(nil)

// NewWhatsmeow is the production client: whatsmeow's, acknowledging a
// message only after the handlers returned (SynchronousAck) with the
// decrypted-event buffer on (a message not acknowledged is decrypted again
// from the buffer when WhatsApp redelivers it), reconnecting on its own,
// also after a failed first connection.
func NewWhatsmeow(dev *store.Device, log waLog.Logger) Client {
	c := whatsmeow.NewClient(dev, log)
	c.SynchronousAck = true
	c.EnableDecryptedEventBuffer = true
	c.EnableAutoReconnect = true
	c.InitialAutoReconnect = true
	c.AutomaticMessageRerequestFromPhone = true
	c.SetMediaHTTPClient(wamsg.MediaClient())
	return c
}
