package host

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/host/internal/rules"
)

// randomSecretSize is the secret's length in bytes.
const randomSecretSize = 32

// randomSecret returns the bot's random secret, the key of its guests' random
// source (wasm.Config.RandomSecret). The first start creates it (crypto/rand)
// and keeps it in the backend; replicas starting together race through
// PutIfAbsent, so they all get the first writer's secret, and a restart or a
// replay on any replica reads the same guest random bytes. A backend that
// cannot create a key only if absent gets a secret for this process only,
// with a warning.
func (b *Bot) randomSecret(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, randomSecretSize)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("random secret: %w", err)
	}
	sc, ok := b.state.(durability.StateCreator)
	if !ok {
		b.log.Warn("the durability backend cannot keep the bot's random secret (its state store has no PutIfAbsent): guest random bytes will differ after a restart and between replicas", "backend", fmt.Sprintf("%T", b.backend))
		return fresh, nil
	}
	secret, created, err := sc.PutIfAbsent(ctx, rules.RandomSecretKey, fresh)
	if err != nil {
		return nil, fmt.Errorf("durability: create or read the bot's random secret: %w (is the backend reachable?)", err)
	}
	if len(secret) != randomSecretSize {
		return nil, fmt.Errorf("durability: the bot's random secret (state key %q) is %d bytes, want %d: the backend holds something else there; delete that key to make a new secret (guest random bytes of old events then change)", rules.RandomSecretKey, len(secret), randomSecretSize)
	}
	if created {
		b.log.Info("created the bot's random secret in the backend")
	}
	return secret, nil
}
