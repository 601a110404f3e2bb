package host

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDataFilesPrivate: under umask 022, every file the embedded backends and
// the wasm compile cache create is 0600 and every directory 0700: the SQLite
// database with its -wal and -shm, the file journal's snapshot, log and lock,
// the compiled modules, and the data directories that hold them.
func TestDataFilesPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for _, backend := range []string{"sqlite", "file"} {
		t.Run(backend, func(t *testing.T) {
			cfg := testConfig(t, "[durability]\nbackend = \""+backend+"\"\npath = \"data/journal/bot."+backend+"\"\n")
			root := filepath.Dir(cfg.File)
			module := filepath.Join(t.TempDir(), "bot.wasm")
			if err := os.WriteFile(module, tinyModule(1), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg.Bot.Module = module
			cfg.Bot.DataDir = filepath.Join(root, "data")
			b := newTestBot(t, cfg, nil, nil)
			if _, err := b.admit(t, "c1", "m1", "hi"); err != nil {
				t.Fatal(err)
			}
			if !b.quiet(1, 60*time.Second) {
				t.Fatal("the message was not handled")
			}
			if backend == "sqlite" {
				for _, suffix := range []string{"-wal", "-shm"} {
					if _, err := os.Stat(filepath.Join(root, "data/journal/bot.sqlite") + suffix); err != nil {
						t.Fatalf("the open database has no %s file: %v", suffix, err)
					}
				}
			}
			checkPrivate(t, root, "while open")
			b.stop(t)
			checkPrivate(t, root, "after close")
		})
	}
}

// checkPrivate fails for every file under root that is not 0600 and every
// directory below root that is not 0700; it wants the cache and the journal
// among them.
func checkPrivate(t *testing.T, root, when string) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700 | fs.ModeDir
		}
		if info.Mode() != want {
			t.Errorf("%s: %s is %s, want %s", when, path, info.Mode(), want)
		}
		if !d.IsDir() {
			files = append(files, strings.TrimPrefix(path, root+"/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var cache, journal bool
	for _, f := range files {
		cache = cache || strings.HasPrefix(f, "data/wasm-cache/")
		journal = journal || strings.HasPrefix(f, "data/journal/")
	}
	if !cache || !journal {
		t.Errorf("%s: want compiled modules under data/wasm-cache and the journal under data/journal, have %v", when, files)
	}
}
