package durability

import (
	"context"
	"errors"
)

// kvState implements StateStore and turns state writes into Kv writes.
type kvState struct {
	kv     Kv
	prefix string
}

func (s *kvState) Get(ctx context.Context, key string) ([]byte, bool, error) {
	b, v, err := s.kv.Get(ctx, s.prefix+key)
	if err != nil || v == 0 {
		return nil, false, err
	}
	return b, true, nil
}

// PutIfAbsent implements StateCreator with a compare-and-set on "absent".
func (s *kvState) PutIfAbsent(ctx context.Context, key string, value []byte) ([]byte, bool, error) {
	for {
		err := s.kv.Commit(ctx, []Write{{Key: s.prefix + key, Version: 0, Value: value}})
		if err == nil {
			return value, true, nil
		}
		if !errors.Is(err, ErrConflict) {
			return nil, false, err
		}
		// Another writer created it first: read theirs. (If it was deleted
		// meanwhile, try again.)
		if b, ok, err := s.Get(ctx, key); err != nil || ok {
			return b, false, err
		}
	}
}

// writes returns the Kv writes of effects, to commit with an inbox completion.
func (s *kvState) writes(effects []StateWrite) []Write {
	var ws []Write
	for _, e := range effects {
		ws = append(ws, Write{Key: s.prefix + e.Key, Version: AnyVersion, Value: e.Value, Delete: e.Delete})
	}
	return ws
}
