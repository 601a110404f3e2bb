package sqlite_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/sqlite"
)

func TestConformance(t *testing.T) {
	for _, sync := range []string{"full", "normal"} {
		t.Run(sync, func(t *testing.T) {
			durabilitytest.Run(t, func(t *testing.T) durability.Backend {
				b, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(t.TempDir(), "bot.db"), Synchronous: sync})
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

// TestCheckpointsBesideTheWriter: the writer never checkpoints in a commit's
// path; the checkpointer copies the WAL into the database file while commits
// land, so it grows without a close.
func TestCheckpointsBesideTheWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.db")
	s, err := sqlite.OpenStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	value := bytes.Repeat([]byte("x"), 1024)
	for i := range 500 {
		if err := s.Commit(context.Background(), []durability.Write{{Key: fmt.Sprint("k", i), Version: durability.AnyVersion, Value: value}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for size() < before+400*1024 {
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s the database file is %d bytes (was %d): the WAL was not checkpointed", size(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
