// Package httpkit is the channels' toolkit: what the channel packages share
// that is not the SPI itself. It holds Base, the embeddable HTTP channel
// (the entry's id, the admitter, the logger, the API's base URL, the guarded
// client and the webhook's answer); the guarded HTTP client (NewClient: no
// private addresses, https-only redirects); API calls and downloads with the
// channel error taxonomy (CallJSON, Download, RateLimited, ErrorAnswer,
// ErrorMessage) and the classification of channel errors (Permanent,
// MediaGone, RetryAfter); webhook reading, authentication and admission
// (ReadWebhook, CheckQueryToken, AdmitAndAnswer, NotAdmitted); the checks of
// a config entry (Required, CheckAPIURL, CheckHTTPURL, APIBase,
// CredentialsAllowed); URL media references (StoreURL, StoredURL); text
// splitting (Split), MaxHandlerTime (the host's bound on a handler), Every
// for a Run's housekeeping, and Opened for a Config's Open.
//
// httpkit may import the standard library and the SPI (host/channel) only.
// The host uses it for the same client, splitting rules, error
// classification and handler bound; the SPI never imports it.
package httpkit
