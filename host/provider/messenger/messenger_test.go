package messenger

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/botrun/botrun/host/provider"
	"github.com/botrun/botrun/host/provider/messenger/messengertest"
)

// TestCapabilities: Messenger limits texts in characters, shows choices and
// typing, and has no edit.
func TestCapabilities(t *testing.T) {
	var p provider.Provider = newProvider(t, DefaultAPI, nil)
	_, edits := p.(provider.Editor)
	_, types := p.(provider.Typist)
	_, chooses := p.(provider.ChoiceLimiter)
	_, bytes := p.(provider.ByteLimiter)
	if tl, ok := p.(provider.TextLimiter); !ok || tl.TextLimit() != 2000 || bytes || edits || !types || !chooses {
		t.Fatalf("text limit %v, byte limit %v, edit %v, typing %v, choices %v", ok, bytes, edits, types, chooses)
	}
}

// TestTokenErrorsArePermanentAndHidden: a revoked page token (190) is not
// retried, and the token never shows in an error.
func TestTokenErrorsArePermanentAndHidden(t *testing.T) {
	srv := httptest.NewServer(messengertest.New("another-token", user))
	defer srv.Close()
	p := newProvider(t, srv.URL+"/"+messengertest.Version, nil)
	_, err := p.Send(context.Background(), provider.Outbound{Chat: user, Text: "x"})
	if !provider.Permanent(err) || strings.Contains(err.Error(), pageToken) {
		t.Fatalf("send with a bad token: %v", err)
	}
}

func TestCheck(t *testing.T) {
	var keys []string
	c := Config{PageToken: "t", AppSecret: "s", VerifyToken: "v", PageID: "1", MediaRefHosts: []string{"cdn.example.com", "https://x"}, APIURL: "http://graph.example.com"}
	c.Check(provider.Setting{}, func(key, _ string, _ ...any) { keys = append(keys, key) })
	if strings.Join(keys, ",") != "api_url,media_ref_hosts[1]" {
		t.Fatalf("problems with %q", keys)
	}
}
