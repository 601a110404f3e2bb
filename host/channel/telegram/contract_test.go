package telegram

import (
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"testing"

	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/channeltest"
	"github.com/botrun/botrun/host/channel/telegram/telegramtest"
)

// num turns a contract message id into a Telegram message_id.
func num(id string) int64 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int64(h.Sum32()>>1) + 1
}

// contract is the channel and its fake as the contract suite sees them.
func contract() channeltest.Channel {
	api := telegramtest.New(token, 42, 43)
	api.Blocked[43] = true
	photo := []byte("\xff\xd8\xff\xe0 a jpeg")
	api.Files["AgACAgQ-big"] = photo
	update := func(msgID, inner string) []byte {
		return fmt.Appendf(nil, `{"update_id":%d,"message":{"message_id":%d,"from":{"id":7,"is_bot":false},"chat":{"id":42,"type":"private"},"date":1764412800,%s}}`,
			num(msgID), num(msgID), inner)
	}
	return channeltest.Channel{
		Type: "telegram",
		Fake: api,
		New: func(t testing.TB, url string, admit channel.Admitter) channel.Channel {
			p, err := Open(Config{ID: "tg", Token: token, SecretToken: "s3cret_token", Mode: "webhook", APIURL: url}, channel.Env{Admitter: admit})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Signed: func(t testing.TB, body []byte) *http.Request {
			return channeltest.Webhook("/webhooks/tg", body, "X-Telegram-Bot-Api-Secret-Token", "s3cret_token")
		},
		SignatureHeader: "X-Telegram-Bot-Api-Secret-Token",
		TextBody: func(msgID, text string) []byte {
			return update(msgID, `"text":`+strconv.Quote(text))
		},
		ImageBody: func(_, msgID string) []byte {
			return update(msgID, `"photo":[{"file_id":"AgACAgQ-small","file_unique_id":"s","width":90,"height":90},{"file_id":"AgACAgQ-big","file_unique_id":"b","width":800,"height":800}]`)
		},
		ImageBytes: photo,
		Ignored: [][]byte{
			[]byte(`{"update_id":900,"edited_message":{"message_id":5,"chat":{"id":42},"date":1,"edit_date":2,"text":"x"}}`),
			[]byte(`{"update_id":901,"message":{"message_id":6,"from":{"id":1,"is_bot":true},"chat":{"id":42},"date":1,"text":"my own"}}`),
			[]byte(`{"update_id":902,"my_chat_member":{"chat":{"id":42}}}`),
		},
		MaxBody:   MaxBody,
		Chat:      "42",
		MediaOut:  channel.Media{Type: "image", Ref: "AgACAgQ-big"},
		GoneMedia: func(string) channel.Media { return channel.Media{Type: "image", Ref: "AgACAgQ-expired"} },
		Texts:     func(chat string) []string { return api.Texts(42) },
		Failures: []channeltest.Failure{
			{Name: "429 retry_after", Arrange: func() channel.Outbound {
				api.Lock()
				api.Limited = 1
				api.Unlock()
				return channel.Outbound{Chat: "42", Text: "x"}
			}, RetryAfter: 7e9},
			channeltest.Refusal("403 bot blocked", channel.Outbound{Chat: "43", Text: "x"}, channel.ErrRecipientUnreachable),
			channeltest.Refusal("400 chat not found", channel.Outbound{Chat: "44", Text: "x"}, channel.ErrRecipientUnreachable),
			{Name: "400 empty text", Arrange: func() channel.Outbound { return channel.Outbound{Chat: "42"} }, Permanent: true},
			channeltest.Refusal("not a chat id", channel.Outbound{Chat: "@name", Text: "x"}, channel.ErrRecipientUnreachable),
		},
		Secrets: []string{token, "s3cret_token"},
	}
}

func TestContract(t *testing.T) { channeltest.Run(t, contract()) }

// BenchmarkWebhook: one signed text webhook read, verified, parsed and admitted.
func BenchmarkWebhook(b *testing.B) { channeltest.Bench(b, contract()) }
