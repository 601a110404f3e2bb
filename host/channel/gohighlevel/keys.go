package gohighlevel

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
)

// DefaultPublicKey is GoHighLevel's published webhook key (its webhook
// authentication guide), which verifies x-wh-signature when public_key is
// not set. It is public data; GoHighLevel may rotate it (set public_key then).
const DefaultPublicKey = `-----BEGIN PUBLIC KEY-----
MIICIjANBgkqhkiG9w0BAQEFAAOCAg8AMIICCgKCAgEAokvo/r9tVgcfZ5DysOSC
Frm602qYV0MaAiNnX9O8KxMbiyRKWeL9JpCpVpt4XHIcBOK4u3cLSqJGOLaPuXw6
dO0t6Q/ZVdAV5Phz+ZtzPL16iCGeK9po6D6JHBpbi989mmzMryUnQJezlYJ3DVfB
csedpinheNnyYeFXolrJvcsjDtfAeRx5ByHQmTnSdFUzuAnC9/GepgLT9SM4nCpv
uxmZMxrJt5Rw+VUaQ9B8JSvbMPpez4peKaJPZHBbU3OdeCVx5klVXXZQGNHOs8gF
3kvoV5rTnXV0IknLBXlcKKAQLZcY/Q9rG6Ifi9c+5vqlvHPCUJFT5XUGG5RKgOKU
J062fRtN+rLYZUV+BjafxQauvC8wSWeYja63VSUruvmNj8xkx2zE/Juc+yjLjTXp
IocmaiFeAO6fUtNjDeFVkhf5LNb59vECyrHD2SQIrhgXpO4Q3dVNA5rw576PwTzN
h/AMfHKIjE4xQA1SZuYJmNnmVZLIZBlQAF9Ntd03rfadZ+yDiOXCCs9FkHibELhC
HULgCsnuDJHcrGNd5/Ddm5hxGQ0ASitgHeMZ0kcIOwKDOzOU53lDza6/Y09T7sYJ
PQe7z0cvj7aE4B+Ax1ZoZGPzpJlZtGXCsu9aTEGEnKzmsFqwcSsnw3JB31IGKAyk
T1hhTiaCeIY/OwwwNUY2yvcCAwEAAQ==
-----END PUBLIC KEY-----`

// Ed25519Header carries GoHighLevel's newer webhook signature: base64
// Ed25519 of the raw body, with DefaultEd25519Key. GoHighLevel sends it
// beside x-wh-signature and prefers it; botrun checks it first when present.
const Ed25519Header = "X-GHL-Signature"

// DefaultEd25519Key is GoHighLevel's published Ed25519 webhook key.
const DefaultEd25519Key = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAi2HR1srL4o18O8BRa7gVJY7G7bupbN3H9AwJrHCDiOg=
-----END PUBLIC KEY-----`

// parseEd25519 parses a PEM (PKIX) Ed25519 public key.
func parseEd25519(s string) (ed25519.PublicKey, bool) {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, false
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	pub, ok := key.(ed25519.PublicKey)
	return pub, err == nil && ok
}

// VerifyEd25519 checks sig (X-GHL-Signature) against body with key: base64
// of the Ed25519 signature of the raw body.
func VerifyEd25519(key ed25519.PublicKey, body []byte, sig string) bool {
	raw, err := base64.StdEncoding.DecodeString(sig)
	return err == nil && len(key) == ed25519.PublicKeySize && ed25519.Verify(key, body, raw)
}
