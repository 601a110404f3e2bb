package httpkit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/botrun/botrun/host/channel"
)

// HostOnly is a Download redactor for a signed URL (its path or query is a
// credential): a transport error names the URL's scheme and host only.
func HostOnly(u *url.URL) func(error) string {
	return func(err error) string {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Op + " " + u.Scheme + "://" + u.Host + "/…: " + ue.Err.Error()
		}
		return err.Error()
	}
}

// Download performs req and returns its body, at most max bytes, from a 200
// or a 201 answer (a gateway's POST that answers the bytes). 404, 410,
// 400 and 403 answers wrap ErrMediaUnavailable (the file is gone or refused),
// and so does a refused redirect or address (with ErrRedirectRefused or
// ErrAddressRefused); other failures are worth a retry. redact cleans
// transport errors that may hold credentials (a token in the URL).
func Download(client *http.Client, req *http.Request, max int64, redact func(error) string) ([]byte, error) {
	resp, err := client.Do(req)
	if err != nil {
		msg := "downloading media: " + redact(err)
		for _, refused := range []error{ErrRedirectRefused, ErrAddressRefused} {
			if errors.Is(err, refused) {
				// Final: the download leads where the channel may not go.
				return nil, fmt.Errorf("%w (%w): %s", channel.ErrMediaUnavailable, refused, msg)
			}
		}
		return nil, errors.New(msg)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound, resp.StatusCode == http.StatusGone,
		resp.StatusCode == http.StatusBadRequest, resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("%w: the channel answered HTTP %d to the download", channel.ErrMediaUnavailable, resp.StatusCode)
	case resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusCreated:
		return nil, fmt.Errorf("downloading media: HTTP %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, fmt.Errorf("downloading media: %s", redact(err))
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w (%d bytes)", channel.ErrMediaTooLarge, max)
	}
	return b, nil
}
