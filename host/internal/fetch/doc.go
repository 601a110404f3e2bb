// Package fetch makes the outbound HTTP calls a bot's handler asks the host
// for (issue 31): one Caller per configured [[apis]] entry joins the guest's
// path under the API's base URL (refusing any path that would leave it),
// merges the guest's headers with the configured ones (credentials, which
// win and never appear in an error), adds the call's Idempotency-Key,
// refuses private destinations unless the API allows them (the host
// resolves the name itself and dials the address it checked), follows
// redirects only on the API's origin, retries connection errors, 429 and
// 5xx inside the API's timeout, and caps the response body.
//
// fetch imports only the standard library.
package fetch
