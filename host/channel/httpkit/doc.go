// Package httpkit is the channels' toolkit: what the channel packages share
// that is not the SPI itself. It holds the guarded HTTP client (NewClient:
// no private addresses, https-only redirects), API calls and downloads with
// the channel error taxonomy (CallJSON, Download, HeaderRetryAfter,
// ErrorMessage), webhook reading, authentication and admission (ReadWebhook,
// CheckQueryToken, AdmitAndAnswer, NotAdmitted), the checks of a config
// entry (Required, CheckAPIURL, CheckHTTPURL, APIBase, CredentialsAllowed),
// URL media references (StoreURL, StoredURL), text splitting (Split) and
// Opened for a Config's Open.
//
// httpkit may import the standard library and the SPI (host/channel) only;
// the host uses it for the same client and splitting rules, never the
// reverse: the SPI does not import it.
package httpkit
