package evolution

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrJWT is wrapped by every VerifyJWT error.
var ErrJWT = errors.New("bad JWT")

// ExpiryLeeway is how long after its exp a webhook's JWT is still accepted.
// Evolution signs one token per event, valid 10 minutes, and sends that same
// token on every retry: 10 attempts, 5 s doubling to at most 300 s between
// them (±20 % jitter), each waiting up to 30 s; the last can come about 29
// minutes after the token was signed, 19 after it expired. A stricter exp
// would answer those retries 401, on which Evolution gives up: the message
// would be lost.
const ExpiryLeeway = 20 * time.Minute

// MaxExpiryAhead is how far past now a webhook's JWT may expire: Evolution's
// 10-minute tokens, with 5 minutes for a clock ahead of botrun's. A token
// with a later exp (or none) is refused, so a captured one is accepted at
// most MaxExpiryAhead + ExpiryLeeway after it was received (ReplayWindow).
const MaxExpiryAhead = 15 * time.Minute

// ReplayWindow is how long after it arrived a captured webhook still passes
// VerifyJWT: its exp at most MaxExpiryAhead ahead, then ExpiryLeeway.
const ReplayWindow = MaxExpiryAhead + ExpiryLeeway

// clockSkew is how far in the future a token's nbf may be.
const clockSkew = time.Minute

// maxJWT bounds a token's length.
const maxJWT = 4096

// b64 decodes a JWT's parts: base64url without padding, strictly (a part
// has one encoding, so a signature cannot be varied and still match).
var b64 = base64.RawURLEncoding.Strict()

// VerifyJWT checks an HS256 JSON Web Token, as Evolution puts in a webhook's
// Authorization header when its webhook headers hold a jwt_key: the header's
// alg must be HS256 (and no crit), the signature the HMAC-SHA256 of
// "<header>.<payload>" with key, compared in constant time before the
// payload is read; then exp is required, not more than ExpiryLeeway past
// nor more than MaxExpiryAhead ahead, and nbf, when present, not in the
// future. Untrusted bytes.
func VerifyJWT(token string, key []byte, now time.Time) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: no key", ErrJWT)
	}
	if len(token) > maxJWT {
		return fmt.Errorf("%w: over %d bytes", ErrJWT, maxJWT)
	}
	head, rest, ok := strings.Cut(token, ".")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(sig, ".") {
		return fmt.Errorf("%w: not three dot-separated parts", ErrJWT)
	}
	hb, err := b64.DecodeString(head)
	if err != nil {
		return fmt.Errorf("%w: the header is not base64url", ErrJWT)
	}
	var h struct {
		Alg  string          `json:"alg"`
		Crit json.RawMessage `json:"crit"`
	}
	if err := json.Unmarshal(hb, &h); err != nil {
		return fmt.Errorf("%w: the header is not JSON", ErrJWT)
	}
	if h.Alg != "HS256" || h.Crit != nil {
		return fmt.Errorf("%w: alg %q (with crit %v), want HS256 without crit", ErrJWT, h.Alg, h.Crit != nil)
	}
	got, err := b64.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("%w: the signature is not base64url", ErrJWT)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(token[:len(head)+1+len(payload)]))
	if !hmac.Equal(got, mac.Sum(nil)) {
		return fmt.Errorf("%w: bad signature", ErrJWT)
	}
	pb, err := b64.DecodeString(payload)
	if err != nil {
		return fmt.Errorf("%w: the payload is not base64url", ErrJWT)
	}
	var claims struct {
		Exp *float64 `json:"exp"`
		Nbf *float64 `json:"nbf"`
	}
	if err := json.Unmarshal(pb, &claims); err != nil {
		return fmt.Errorf("%w: the payload is not a JSON object with numeric exp and nbf", ErrJWT)
	}
	unix := float64(now.Unix())
	switch {
	case claims.Exp == nil:
		return fmt.Errorf("%w: no exp (a token without one would be valid forever)", ErrJWT)
	case unix > *claims.Exp+ExpiryLeeway.Seconds():
		return fmt.Errorf("%w: expired at %s", ErrJWT, time.Unix(int64(*claims.Exp), 0).UTC().Format(time.RFC3339))
	case *claims.Exp > unix+MaxExpiryAhead.Seconds():
		return fmt.Errorf("%w: exp %s is more than %s ahead (Evolution's tokens last 10 minutes; is its clock right?)", ErrJWT, time.Unix(int64(*claims.Exp), 0).UTC().Format(time.RFC3339), MaxExpiryAhead)
	}
	if claims.Nbf != nil && unix < *claims.Nbf-clockSkew.Seconds() {
		return fmt.Errorf("%w: not valid before %s", ErrJWT, time.Unix(int64(*claims.Nbf), 0).UTC().Format(time.RFC3339))
	}
	return nil
}
