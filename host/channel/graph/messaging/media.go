package messaging

import (
	"github.com/botrun/botrun/host/channel"
	"github.com/botrun/botrun/host/channel/internal/urlmedia"
)

// Attachment URLs are the durable media references (package urlmedia): the
// Channel's embedded *urlmedia.Media journals an attachment's URL only when
// it is https on one of the media hosts or a subdomain (or on api_url's own
// origin), and downloads it without the token: the URL is signed and expires
// (days), after which a load answers 403 or 404 and the media is unavailable.

// CheckHosts checks a media_ref_hosts key: host names (a subdomain of one
// is allowed too), without a scheme, a port or a path.
func CheckHosts(problem channel.Problem, key string, hosts []string) {
	urlmedia.CheckHosts(problem, key, hosts)
}
