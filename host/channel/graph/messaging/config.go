package messaging

import (
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/httpkit"
)

// Config is the part of a [[channels]] entry that Messenger and Instagram
// share; each embeds it beside its own token and page or account id, and
// gives its fields to Spec.
type Config struct {
	// ID is the entry's id.
	ID string `toml:"id"`
	// AppSecret verifies X-Hub-Signature-256 on every webhook (use ${ENV}).
	AppSecret string `toml:"app_secret"`
	// VerifyToken answers the hub.challenge subscription handshake.
	VerifyToken string `toml:"verify_token"`
	// APIURL is the Graph API base URL with its version (default: the
	// channel's DefaultAPI).
	APIURL string `toml:"api_url"`
	// MediaRefHosts replaces the channel's MediaHosts.
	MediaRefHosts []string `toml:"media_ref_hosts"`
}

// Check reports the shared keys' problems in the entry's order:
// app_secret (secretHow says where the app's secret is), verify_token,
// then the channel's own keys (own), api_url and media_ref_hosts.
func (c *Config) Check(problem channel.Problem, secretHow string, own func()) {
	httpkit.Required(problem, "app_secret", c.AppSecret, secretHow)
	httpkit.Required(problem, "verify_token", c.VerifyToken, "a string of your choice, entered again as the webhook's verify token in the Meta app")
	own()
	httpkit.CheckAPIURL(c.APIURL, problem)
	CheckHosts(problem, "media_ref_hosts", c.MediaRefHosts)
}
