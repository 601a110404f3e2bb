// Package whatsappwebtest is a fake of WhatsApp for the whatsapp-web
// channel's tests: a Network (the accounts on WhatsApp, the media hosts, the
// messages sent, the devices online, the phone a device is linked to) and
// its Clients, which take the calls of whatsappweb.Client with whatsmeow's
// own types and emit whatsmeow's own events (events.Message,
// events.MediaRetry, events.LoggedOut, …).
//
// It answers as whatsmeow and WhatsApp do, as far as whatsmeow's code shows:
// sends need a linked, connected device (ErrNotLoggedIn, ErrNotConnected);
// a recipient with a device part is ErrRecipientADJID, an unknown server
// ErrUnknownServer, a group the account is not in ErrGroupNotFound; a
// number without an account is answered IsIn=false by IsOnWhatsApp and a
// message to it is accepted and delivered nowhere (Delivered false), as the
// server cannot tell (the content is end-to-end encrypted, so the server
// never refuses a message for what it holds); a download checks the media
// key, the hashes and the media type (ErrInvalidMediaHMAC, …) and a file the
// hosts dropped answers 410; a media retry is answered by the sender's phone
// (a new direct path, encrypted as WhatsApp encrypts it), or "not on the
// phone", or not at all when the phone is offline; a second connection of
// one device replaces the first (events.StreamReplaced); GetQRChannel wants
// an unpaired device and no connection yet, PairPhone an international
// number. Failures are queued per call (Fail).
package whatsappwebtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mau.fi/whatsmeow"
	"go.mau.fi/whatsmeow/proto/waAdv"
	"go.mau.fi/whatsmeow/proto/waE2E"
	"go.mau.fi/whatsmeow/proto/waMmsRetry"
	"go.mau.fi/whatsmeow/store"
	"go.mau.fi/whatsmeow/types"
	"go.mau.fi/whatsmeow/types/events"
	"go.mau.fi/whatsmeow/util/gcmutil"
	"go.mau.fi/whatsmeow/util/hkdfutil"
	waLog "go.mau.fi/whatsmeow/util/log"
	"google.golang.org/protobuf/proto"
)

// Sent is one message a client sent.
type Sent struct {
	From, To types.JID
	ID       types.MessageID
	Message  *waE2E.Message
	// Delivered is false for a number without an account.
	Delivered bool
}

// Read is one read receipt.
type Read struct {
	Chat, Sender types.JID
	IDs          []types.MessageID
}

// Presence is one chat presence (typing) update.
type Presence struct {
	Chat  types.JID
	State types.ChatPresence
}

type blob struct {
	data           []byte
	kind           whatsmeow.MediaType
	key            []byte
	sha, encSHA    []byte
	expired        bool
	owner          types.MessageID // the inbound message it came in
	lostFromPhones bool
}

// Network is the fake WhatsApp. Its zero value is not usable: NewNetwork.
type Network struct {
	mu         sync.Mutex
	registered map[string]types.JID // phone digits → account JID
	groups     map[types.JID]bool
	media      map[string]*blob // direct path → file
	byMessage  map[types.MessageID]string
	sent       []Sent
	reads      []Read
	presences  []Presence
	available  int
	fail       map[string][]error
	online     map[types.JID]*Client
	clients    []*Client
	n          atomic.Int64
	// The phone: the account a pairing links, after how many QR codes,
	// and whether it answers media retries.
	account      types.JID
	linkAfter    int
	phoneOffline bool
	// down fails every client's calls (Down).
	down atomic.Bool
}

// NewNetwork returns a fake WhatsApp whose phone links devices to account
// (e.g. "15550001111@s.whatsapp.net") when its second QR code is scanned.
func NewNetwork(account types.JID) *Network {
	return &Network{registered: map[string]types.JID{}, groups: map[types.JID]bool{}, media: map[string]*blob{},
		byMessage: map[types.MessageID]string{}, fail: map[string][]error{}, online: map[types.JID]*Client{},
		account: account, linkAfter: 2}
}

// Register puts phone numbers (digits) on WhatsApp.
func (n *Network) Register(phones ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range phones {
		n.registered[p] = types.NewJID(p, types.DefaultUserServer)
	}
}

// Group makes the account a member of group.
func (n *Network) Group(group types.JID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.groups[group] = true
}

// LinkAfter makes the phone link a pairing device when it sees its k-th QR
// code (0: never).
func (n *Network) LinkAfter(k int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkAfter = k
}

// PhoneOffline makes the senders' phones ignore media retries.
func (n *Network) PhoneOffline(off bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.phoneOffline = off
}

// Down makes every client's calls answer whatsmeow.ErrNotConnected, as
// whatsmeow does while its connection is lost (true), or not (false). The
// clients emit no disconnection: the loss is between two keepalives.
func (n *Network) Down(down bool) { n.down.Store(down) }

// Fail queues err as the answer of the next call of method ("SendMessage",
// "IsOnWhatsApp", "Upload", "Download", "SendChatPresence", "MarkRead").
func (n *Network) Fail(method string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail[method] = append(n.fail[method], err)
}

func (n *Network) failed(method string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.fail[method]
	if len(q) == 0 {
		return nil
	}
	n.fail[method] = q[1:]
	return q[0]
}

// Sent returns the messages sent so far.
func (n *Network) Sent() []Sent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Sent(nil), n.sent...)
}

// Reads returns the read receipts sent so far.
func (n *Network) Reads() []Read {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Read(nil), n.reads...)
}

// Presences returns the chat presences sent so far, and how many times the
// device said it is available.
func (n *Network) Presences() ([]Presence, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Presence(nil), n.presences...), n.available
}

// Online returns the connected client of the device jid, or nil.
func (n *Network) Online(jid types.JID) *Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.online[jid]
}

// Clients returns every client made so far.
func (n *Network) Clients() []*Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Client(nil), n.clients...)
}

func random(k int) []byte {
	b := make([]byte, k)
	rand.Read(b)
	return b
}

// encSHA is the fake's stand-in for the SHA-256 of the encrypted file.
func encSHA(data, key []byte) []byte {
	h := sha256.Sum256(append(append([]byte("enc:"), key...), data...))
	return h[:]
}

// host puts data on the media hosts as an upload of kind would.
func (n *Network) host(data []byte, kind whatsmeow.MediaType, owner types.MessageID) whatsmeow.UploadResponse {
	key := random(32)
	sha := sha256.Sum256(data)
	path := fmt.Sprintf("/v/t62.7118-24/%d_%s_n.enc?ccb=11-4&oh=01_%s&oe=68A0B1C2&_nc_sid=5e03e0", n.n.Add(1), hex.EncodeToString(random(6)), hex.EncodeToString(random(8)))
	b := &blob{data: append([]byte(nil), data...), kind: kind, key: key, sha: sha[:], encSHA: encSHA(data, key), owner: owner}
	n.mu.Lock()
	n.media[path] = b
	if owner != "" {
		n.byMessage[owner] = path
	}
	n.mu.Unlock()
	return whatsmeow.UploadResponse{URL: "https://mmg.whatsapp.net" + path, DirectPath: path, MediaKey: key,
		FileEncSHA256: b.encSHA, FileSHA256: b.sha, FileLength: uint64(len(data))}
}

// Incoming is a message as the device receives it: whatsmeow's event,
// unwrapped as whatsmeow unwraps it (ephemeral, view-once, edits). Media in
// msg should come from Media with the same id.
func (n *Network) Incoming(id types.MessageID, chat, sender types.JID, msg *waE2E.Message) *events.Message {
	info := types.MessageInfo{ID: id, Timestamp: time.Unix(1767225600, 0),
		MessageSource: types.MessageSource{Chat: chat, Sender: sender, IsGroup: chat.Server == types.GroupServer}}
	return (&events.Message{Info: info, RawMessage: msg}).UnwrapRaw()
}

// Media uploads data as the sender of message id would (the sender's phone
// keeps it for media retries) and returns what goes in its media message.
func (n *Network) Media(id types.MessageID, kind whatsmeow.MediaType, data []byte) whatsmeow.UploadResponse {
	return n.host(data, kind, id)
}

// Expire drops the file at path from the media hosts (as they do after some
// weeks); the sender's phone still has it unless lost.
func (n *Network) Expire(path string, lost bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if b := n.media[path]; b != nil {
		b.expired, b.lostFromPhones = true, lost
	}
}

// Client is one whatsmeow client of the fake network.
type Client struct {
	net *Network
	dev *store.Device

	mu        sync.Mutex
	handlers  []handler
	connected bool
	qr        chan whatsmeow.QRChannelItem
	pairCode  bool
	linked    chan struct{}
}

type handler struct {
	id uint32
	fn whatsmeow.EventHandlerWithSuccessStatus
}

var handlerIDs atomic.Uint32

// NewClient returns the fake client of a device store: the signature of
// whatsappweb.NewClientFunc.
func (n *Network) NewClient(dev *store.Device, _ waLog.Logger) *Client {
	c := &Client{net: n, dev: dev, linked: make(chan struct{})}
	n.mu.Lock()
	n.clients = append(n.clients, c)
	n.mu.Unlock()
	return c
}

// Device is the client's device store.
func (c *Client) Device() *store.Device { return c.dev }

// Emit dispatches evt to the handlers as whatsmeow does, in order, and
// reports whether every one succeeded (for a message: whether whatsmeow
// acknowledges it).
func (c *Client) Emit(evt any) bool {
	c.mu.Lock()
	hs := append([]handler(nil), c.handlers...)
	c.mu.Unlock()
	for _, h := range hs {
		if !h.fn(evt) {
			return false
		}
	}
	return true
}

// AddEventHandlerWithSuccessStatus implements whatsappweb.Client.
func (c *Client) AddEventHandlerWithSuccessStatus(fn whatsmeow.EventHandlerWithSuccessStatus) uint32 {
	id := handlerIDs.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers = append(c.handlers, handler{id, fn})
	return id
}

// RemoveEventHandler implements whatsappweb.Client.
func (c *Client) RemoveEventHandler(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, h := range c.handlers {
		if h.id == id {
			c.handlers = append(c.handlers[:i], c.handlers[i+1:]...)
			return true
		}
	}
	return false
}

// Connected reports whether the client is connected.
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connected
}

// ConnectContext implements whatsappweb.Client: a paired device logs in
// (events.Connected, and a connection of the same device elsewhere is
// replaced); an unpaired one starts emitting QR codes to its QR channel.
func (c *Client) ConnectContext(ctx context.Context) error {
	c.mu.Lock()
	if c.connected {
		c.mu.Unlock()
		return whatsmeow.ErrAlreadyConnected
	}
	c.connected = true
	qr := c.qr
	c.mu.Unlock()
	if c.dev.ID == nil {
		if qr != nil {
			go c.pairing(ctx, qr)
		}
		return nil
	}
	jid := *c.dev.ID
	c.net.mu.Lock()
	old := c.net.online[jid]
	c.net.online[jid] = c
	c.net.mu.Unlock()
	if old != nil && old != c {
		old.drop()
		go old.Emit(&events.StreamReplaced{})
	}
	go c.Emit(&events.Connected{})
	return nil
}

// drop closes the connection without an event.
func (c *Client) drop() {
	c.mu.Lock()
	c.connected = false
	c.mu.Unlock()
}

// Disconnect implements whatsappweb.Client.
func (c *Client) Disconnect() {
	c.drop()
	if c.dev.ID != nil {
		c.net.mu.Lock()
		if c.net.online[*c.dev.ID] == c {
			delete(c.net.online, *c.dev.ID)
		}
		c.net.mu.Unlock()
	}
}

// IsLoggedIn implements whatsappweb.Client.
func (c *Client) IsLoggedIn() bool { return c.Connected() && c.dev.ID != nil }

// LogOut unlinks the device as the phone does: whatsmeow deletes the
// device from its store, emits events.LoggedOut and disconnects.
func (c *Client) LogOut() {
	c.Disconnect()
	c.dev.Delete(context.Background())
	c.Emit(&events.LoggedOut{Reason: events.ConnectFailureLoggedOut})
}

// Drop loses the connection and reconnects, as whatsmeow's auto-reconnect
// does: events.Disconnected, then events.Connected.
func (c *Client) Drop() {
	c.drop()
	c.Emit(&events.Disconnected{})
	c.mu.Lock()
	c.connected = true
	c.mu.Unlock()
	c.Emit(&events.Connected{})
}

func (c *Client) ready() error {
	if c.dev.ID == nil {
		return whatsmeow.ErrNotLoggedIn
	}
	if !c.Connected() || c.net.down.Load() {
		return whatsmeow.ErrNotConnected
	}
	return nil
}

// call is the start of a call that needs a connected, linked device: that,
// then a failure queued for method.
func (c *Client) call(method string) error {
	if err := c.ready(); err != nil {
		return err
	}
	return c.net.failed(method)
}

// SendMessage implements whatsappweb.Client.
func (c *Client) SendMessage(ctx context.Context, to types.JID, msg *waE2E.Message, extra ...whatsmeow.SendRequestExtra) (whatsmeow.SendResponse, error) {
	if len(extra) > 1 {
		return whatsmeow.SendResponse{}, fmt.Errorf("only one extra parameter may be provided to SendMessage")
	}
	if c.dev.ID == nil {
		return whatsmeow.SendResponse{}, whatsmeow.ErrNotLoggedIn
	}
	if to.Device > 0 {
		return whatsmeow.SendResponse{}, whatsmeow.ErrRecipientADJID
	}
	switch to.Server {
	case types.DefaultUserServer, types.HiddenUserServer, types.GroupServer:
	default:
		return whatsmeow.SendResponse{}, fmt.Errorf("%w %s", whatsmeow.ErrUnknownServer, to.Server)
	}
	c.net.mu.Lock()
	inGroup := c.net.groups[to]
	c.net.mu.Unlock()
	if to.Server == types.GroupServer && !inGroup {
		return whatsmeow.SendResponse{}, fmt.Errorf("failed to get group members: %w", whatsmeow.ErrGroupNotFound)
	}
	if !c.Connected() || c.net.down.Load() {
		return whatsmeow.SendResponse{}, fmt.Errorf("failed to send message node: %w", whatsmeow.ErrNotConnected)
	}
	if err := c.net.failed("SendMessage"); err != nil {
		return whatsmeow.SendResponse{}, err
	}
	var id types.MessageID
	if len(extra) == 1 {
		id = extra[0].ID
	}
	if id == "" {
		id = types.MessageID(whatsmeow.WebMessageIDPrefix + strings.ToUpper(hex.EncodeToString(random(9))))
	}
	c.net.mu.Lock()
	delivered := to.Server != types.DefaultUserServer
	for _, jid := range c.net.registered {
		delivered = delivered || jid == to
	}
	c.net.sent = append(c.net.sent, Sent{From: *c.dev.ID, To: to, ID: id, Message: proto.Clone(msg).(*waE2E.Message), Delivered: delivered})
	c.net.mu.Unlock()
	return whatsmeow.SendResponse{ID: id, Timestamp: time.Now(), Sender: *c.dev.ID}, nil
}

// Upload implements whatsappweb.Client.
func (c *Client) Upload(ctx context.Context, data []byte, kind whatsmeow.MediaType) (whatsmeow.UploadResponse, error) {
	if err := c.ready(); err != nil {
		return whatsmeow.UploadResponse{}, fmt.Errorf("failed to refresh media connections: %w", err)
	}
	if err := c.net.failed("Upload"); err != nil {
		return whatsmeow.UploadResponse{}, err
	}
	return c.net.host(data, kind, ""), nil
}

// Download implements whatsappweb.Client.
func (c *Client) Download(ctx context.Context, msg whatsmeow.DownloadableMessage) ([]byte, error) {
	if err := c.ready(); err != nil {
		return nil, fmt.Errorf("failed to refresh media connections: %w", err)
	}
	if err := c.net.failed("Download"); err != nil {
		return nil, err
	}
	kind := whatsmeow.GetMediaType(msg)
	if kind == "" {
		return nil, fmt.Errorf("%w %T", whatsmeow.ErrUnknownMediaType, msg)
	}
	if msg.GetDirectPath() == "" {
		return nil, whatsmeow.ErrNoURLPresent
	}
	c.net.mu.Lock()
	b := c.net.media[msg.GetDirectPath()]
	c.net.mu.Unlock()
	switch {
	case b == nil:
		return nil, whatsmeow.ErrMediaDownloadFailedWith404
	case b.expired:
		return nil, whatsmeow.ErrMediaDownloadFailedWith410
	case !bytes.Equal(msg.GetFileEncSHA256(), b.encSHA):
		return nil, whatsmeow.ErrInvalidMediaEncSHA256
	case !bytes.Equal(msg.GetMediaKey(), b.key) || kind != b.kind:
		return nil, whatsmeow.ErrInvalidMediaHMAC
	case !bytes.Equal(msg.GetFileSHA256(), b.sha):
		return nil, whatsmeow.ErrInvalidMediaSHA256
	}
	return append([]byte(nil), b.data...), nil
}

// SendMediaRetryReceipt implements whatsappweb.Client: the sender's phone
// answers with events.MediaRetry, soon after, unless it is offline.
func (c *Client) SendMediaRetryReceipt(ctx context.Context, info *types.MessageInfo, mediaKey []byte) error {
	if c.dev.ID == nil {
		return whatsmeow.ErrNotLoggedIn
	}
	if err := c.ready(); err != nil {
		return err
	}
	c.net.mu.Lock()
	offline := c.net.phoneOffline
	path, ok := c.net.byMessage[info.ID]
	var b *blob
	if ok {
		b = c.net.media[path]
	}
	c.net.mu.Unlock()
	if offline {
		return nil
	}
	evt := &events.MediaRetry{Timestamp: time.Now(), MessageID: info.ID, ChatID: info.Chat, SenderID: info.Sender}
	switch {
	case b == nil || b.lostFromPhones:
		evt.Error = &events.MediaRetryError{Code: 2}
	case !bytes.Equal(mediaKey, b.key):
		// The phone cannot decrypt the request: it answers nothing useful.
		evt.Error = &events.MediaRetryError{Code: 1}
	default:
		up := c.net.host(b.data, b.kind, info.ID)
		c.net.mu.Lock()
		nb := c.net.media[up.DirectPath]
		nb.key, nb.encSHA, nb.sha = b.key, b.encSHA, b.sha
		c.net.mu.Unlock()
		plain, _ := proto.Marshal(&waMmsRetry.MediaRetryNotification{StanzaID: proto.String(string(info.ID)),
			DirectPath: proto.String(up.DirectPath), Result: waMmsRetry.MediaRetryNotification_SUCCESS.Enum()})
		evt.IV = random(12)
		key := hkdfutil.SHA256(mediaKey, nil, []byte("WhatsApp Media Retry Notification"), 32)
		var err error
		if evt.Ciphertext, err = gcmutil.Encrypt(key, evt.IV, plain, []byte(info.ID)); err != nil {
			return err
		}
	}
	// The answer arrives before the call returns (the waiting download
	// registered for it before asking), so a test's short MediaRetryWait
	// never races a goroutine's scheduling on a loaded machine.
	c.Emit(evt)
	return nil
}

// MarkRead implements whatsappweb.Client.
func (c *Client) MarkRead(ctx context.Context, ids []types.MessageID, _ time.Time, chat, sender types.JID, _ ...types.ReceiptType) error {
	if len(ids) == 0 {
		return fmt.Errorf("no message IDs specified")
	}
	if err := c.call("MarkRead"); err != nil {
		return err
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.net.reads = append(c.net.reads, Read{Chat: chat, Sender: sender, IDs: append([]types.MessageID(nil), ids...)})
	return nil
}

// SendPresence implements whatsappweb.Client.
func (c *Client) SendPresence(ctx context.Context, state types.Presence) error {
	if c.dev.PushName == "" {
		return whatsmeow.ErrNoPushName
	}
	if err := c.ready(); err != nil {
		return err
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	if state == types.PresenceAvailable {
		c.net.available++
	}
	return nil
}

// SendChatPresence implements whatsappweb.Client.
func (c *Client) SendChatPresence(ctx context.Context, jid types.JID, state types.ChatPresence, _ types.ChatPresenceMedia) error {
	if err := c.call("SendChatPresence"); err != nil {
		return err
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.net.presences = append(c.net.presences, Presence{Chat: jid, State: state})
	return nil
}

// IsOnWhatsApp implements whatsappweb.Client.
func (c *Client) IsOnWhatsApp(ctx context.Context, phones []string) ([]types.IsOnWhatsAppResponse, error) {
	if err := c.call("IsOnWhatsApp"); err != nil {
		return nil, err
	}
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	var out []types.IsOnWhatsAppResponse
	for _, p := range phones {
		digits := strings.TrimPrefix(p, "+")
		jid, ok := c.net.registered[digits]
		if !ok {
			jid = types.NewJID(digits, types.DefaultUserServer)
		}
		out = append(out, types.IsOnWhatsAppResponse{Query: p, JID: jid, IsIn: ok})
	}
	return out, nil
}

// GetQRChannel implements whatsappweb.Client: call it before ConnectContext,
// on an unpaired device.
func (c *Client) GetQRChannel(ctx context.Context) (<-chan whatsmeow.QRChannelItem, error) {
	if c.dev.ID != nil {
		return nil, whatsmeow.ErrQRStoreContainsID
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.connected {
		return nil, whatsmeow.ErrQRAlreadyConnected
	}
	c.qr = make(chan whatsmeow.QRChannelItem)
	return c.qr, nil
}

// PairPhone implements whatsappweb.Client: the phone links the device once
// the code is entered (at once, here).
func (c *Client) PairPhone(ctx context.Context, phone string, _ bool, _ whatsmeow.PairClientType, _ string) (string, error) {
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, phone)
	switch {
	case len(digits) <= 6:
		return "", whatsmeow.ErrPhoneNumberTooShort
	case strings.HasPrefix(digits, "0"):
		return "", whatsmeow.ErrPhoneNumberIsNotInternational
	case !c.Connected():
		return "", whatsmeow.ErrNotConnected
	}
	c.mu.Lock()
	c.pairCode = true
	c.mu.Unlock()
	return "ABCD-1234", nil
}

// pairing emits QR codes until the phone links the device (after the
// network's linkAfter-th code, or once a pairing code was asked) or the
// codes run out, as whatsmeow's QR channel does.
func (c *Client) pairing(ctx context.Context, qr chan whatsmeow.QRChannelItem) {
	defer close(qr)
	c.net.mu.Lock()
	linkAfter, account := c.net.linkAfter, c.net.account
	c.net.mu.Unlock()
	send := func(item whatsmeow.QRChannelItem) bool {
		select {
		case qr <- item:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for i := 1; i <= 6; i++ {
		code := fmt.Sprintf("2@%s,%s,%s,%s", hex.EncodeToString(random(16)), hex.EncodeToString(random(32)), hex.EncodeToString(random(32)), hex.EncodeToString(random(16)))
		if !send(whatsmeow.QRChannelItem{Event: whatsmeow.QRChannelEventCode, Code: code, Timeout: 20 * time.Second}) {
			return
		}
		c.mu.Lock()
		byCode := c.pairCode
		c.mu.Unlock()
		if i == linkAfter || byCode {
			jid := types.NewADJID(account.User, 0, 17)
			c.dev.ID = &jid
			c.dev.PushName = "botrun test"
			c.dev.Account = &waAdv.ADVSignedDeviceIdentity{Details: []byte{1}, AccountSignature: random(64), AccountSignatureKey: random(32), DeviceSignature: random(64)}
			if err := c.dev.Save(context.Background()); err != nil {
				send(whatsmeow.QRChannelItem{Event: whatsmeow.QRChannelEventError, Error: err})
				return
			}
			c.Emit(&events.PairSuccess{ID: jid})
			send(whatsmeow.QRChannelSuccess)
			return
		}
	}
	send(whatsmeow.QRChannelTimeout)
	c.Disconnect()
}
