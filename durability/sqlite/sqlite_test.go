package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/sqlite"
)

func TestConformance(t *testing.T) {
	for _, sync := range []string{"full", "normal"} {
		t.Run(sync, func(t *testing.T) {
			durabilitytest.Run(t, func(t *testing.T) durability.Backend {
				b, err := sqlite.Open(filepath.Join(t.TempDir(), "bot.db"), &sqlite.Options{Synchronous: sync})
				if err != nil {
					t.Fatal(err)
				}
				return b
			})
		})
	}
}

func TestAckedWritesSurviveSIGKILL(t *testing.T) {
	durabilitytest.AckedWritesSurviveKill(t, "TestAckedWritesSurviveSIGKILL", func(path string) (durability.Kv, error) {
		return sqlite.OpenStore(path, nil)
	})
}
