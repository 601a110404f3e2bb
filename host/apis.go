package host

import (
	"fmt"
	"net/url"
	"time"

	"github.com/botrun/botrun/host/config"
	"github.com/botrun/botrun/host/internal/fetch"
	"github.com/botrun/botrun/host/internal/turn"
)

// buildAPIs makes a caller for each [[apis]] entry.
func buildAPIs(entries []config.API, o fetch.Options) (map[string]turn.API, error) {
	apis := make(map[string]turn.API, len(entries))
	for _, a := range entries {
		base, err := url.Parse(a.URL)
		if err != nil { // config.Load refused it already; the URL may hold a secret
			return nil, fmt.Errorf("apis %s: url is not a URL", a.Name)
		}
		c, err := fetch.New(fetch.API{Name: a.Name, Base: base, Headers: a.Headers, Timeout: time.Duration(a.Timeout),
			MaxResponse: int64(a.MaxResponse), Retries: *a.Retries, AllowPrivate: a.AllowPrivate}, o)
		if err != nil {
			return nil, fmt.Errorf("apis %s: %w", a.Name, err)
		}
		apis[a.Name] = turn.API{Caller: c, Journal: *a.Journal}
	}
	return apis, nil
}
