package durability

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Scope is a bot's namespace in a shared backend.
type Scope struct {
	Tenant      string
	Environment string
	Bot         string
	Connection  string
}

// ID derives the scope id: a short, stable hash of the four names. Two bots
// with different scopes never see each other's records; explicit idempotency
// keys are per scope.
func (s Scope) ID() string {
	h := sha256.Sum256([]byte(strings.Join([]string{"botrun.scope.v1", s.Tenant, s.Environment, s.Bot, s.Connection}, "\x00")))
	return hex.EncodeToString(h[:8])
}
