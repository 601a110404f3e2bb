package file

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/durability/durabilitytest"
	"github.com/botrun/botrun/durability/memory"
)

func TestSharedConformance(t *testing.T) {
	for name, opts := range map[string]SharedOptions{
		"snapshot":   {Options: Options{NoFsync: true}},
		"append_log": {Options: Options{AppendLog: true, NoFsync: true}},
		"compacting": {Options: Options{AppendLog: true, CompactEvery: 7, NoFsync: true}},
	} {
		t.Run(name, func(t *testing.T) {
			durabilitytest.Run(t, func(t *testing.T) durability.Backend {
				s, err := OpenSharedStore(filepath.Join(t.TempDir(), "bot.journal"), &opts)
				if err != nil {
					t.Fatal(err)
				}
				return durability.NewKvDurability(s)
			}, whole(opts.AppendLog)...)
		})
	}
}

// TestSharedStoresSeeEachOther: two stores on one file (as two processes
// would) read each other's writes, and a compare-and-set against a version
// the other store replaced is refused.
func TestSharedStoresSeeEachOther(t *testing.T) {
	for _, appendLog := range []bool{false, true} {
		t.Run(fmt.Sprint("append_log=", appendLog), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bot.journal")
			opts := &SharedOptions{Options: Options{AppendLog: appendLog, CompactEvery: 3, NoFsync: true}}
			a, err := OpenSharedStore(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := OpenSharedStore(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ctx := context.Background()
			for i := range 10 {
				w, r := a, b
				if i%2 == 1 {
					w, r = b, a
				}
				_, v, err := r.Get(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Commit(ctx, []durability.Write{{Key: "k", Version: v, Value: []byte(strconv.Itoa(i))}}); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
				got, _, err := r.Get(ctx, "k")
				if err != nil || string(got) != strconv.Itoa(i) {
					t.Fatalf("after write %d the other store reads %q, %v", i, got, err)
				}
				// The reader's version is stale now.
				if err := r.Commit(ctx, []durability.Write{{Key: "k", Version: v, Value: []byte("stale")}}); !errors.Is(err, durability.ErrConflict) {
					t.Fatalf("a compare-and-set on a replaced version: %v", err)
				}
			}
		})
	}
}

// TestSharedStoreAndLockedStoreExclude: a locked store refuses a file a live
// shared store uses, and a shared store refuses every operation on a file a
// locked store holds, whichever opened first.
func TestSharedStoreAndLockedStoreExclude(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	sh, err := OpenSharedStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(path, nil); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "in use by a shared journal") {
		t.Fatalf("locked open of a shared file: %v", err)
	}
	sh.Close()
	locked, err := OpenStore(path, nil)
	if err != nil {
		t.Fatalf("locked open once the shared store closed: %v", err)
	}
	if _, err := OpenSharedStore(path, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("shared open of a locked file: %v", err)
	}
	locked.Close()
	sh, err = OpenSharedStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	// A locked journal that a process (here, a pid that is alive: 1)
	// opened after the shared one: each shared operation is refused.
	os.WriteFile(path+".lock", []byte("1\n"), 0o600)
	if _, _, err := sh.Get(context.Background(), "k"); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "held by live process 1") {
		t.Fatalf("shared read of a file locked later: %v", err)
	}
	os.Remove(path + ".lock")
	if _, _, err := sh.Get(context.Background(), "k"); err != nil {
		t.Fatalf("shared read once the lock is gone: %v", err)
	}
}

func TestSharedTornLastLineIsTrimmedAndCorruptionRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	good := `{"seq":1,"w":[{"k":"a","v":"MQ=="}]}` + "\n"
	writeLog(t, path, good, `{"seq":2,"w":[{"k":"b","v`)
	s, err := OpenSharedStore(path, &SharedOptions{Options: Options{AppendLog: true}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := s.Get(context.Background(), "a"); string(v) != "1" {
		t.Fatal("the good line was not applied")
	}
	if b, _ := os.ReadFile(path + ".log"); string(b) != good {
		t.Fatalf("log not trimmed: %q", b)
	}
	s.Close()
	lines := []string{good, "garbage\n", `{"seq":3,"w":[{"k":"c","v":"Mw=="}]}` + "\n"}
	writeLog(t, path, lines...)
	_, err = OpenSharedStore(path, nil)
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Code != CodeAppendLogCorrupt || ce.Line != 2 || ce.Byte != len(good) {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(path + ".log"); string(b) != strings.Join(lines, "") {
		t.Fatal("a corrupt log was modified")
	}
}

const sharedChildEnv = "BOTRUN_SHARED_CHILD"

// TestSharedStoreProcesses runs several processes that increment one counter
// by compare-and-set, each increment writing its own key in the same commit,
// over a log that compacts every few entries; two of them are SIGKILLed
// mid-run (their mutex broken at once) and replaced. At the end the counter
// equals the number of keys (no increment lost, none applied twice), and every
// increment a process acknowledged is there.
func TestSharedStoreProcesses(t *testing.T) {
	if spec := os.Getenv(sharedChildEnv); spec != "" {
		sharedChild(t, spec)
		return
	}
	path := filepath.Join(t.TempDir(), "bot.journal")
	const perChild = 120
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	run := func(name string, killAfter int) {
		defer wg.Done()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSharedStoreProcesses$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", sharedChildEnv, path, name, perChild))
		out, _ := cmd.StdoutPipe()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Error(err)
			return
		}
		sc := bufio.NewScanner(out)
		n := 0
		for sc.Scan() {
			if key, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
				mu.Lock()
				acked[key] = true
				mu.Unlock()
				if n++; n == killAfter {
					cmd.Process.Signal(syscall.SIGKILL)
					break
				}
			}
		}
		err := cmd.Wait()
		if killAfter == 0 && (err != nil || n != perChild) {
			t.Errorf("%s: %d acks, %v\n%s", name, n, err, stderr.String())
		}
	}
	wg.Add(6)
	go run("a", 0)
	go run("b", 0)
	go func() { run("k1", 40); run("c", 0) }()
	go func() { run("k2", 75); run("d", 0) }()
	wg.Wait()

	s, err := OpenSharedStore(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	counter, _, err := s.Get(ctx, "counter")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.Range(ctx, "keys/", durability.IndexOrder, durability.IndexEntry{Score: math.MinInt64}, math.MaxInt64, 0)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range keys {
		have[e.Key] = true
	}
	for key := range acked {
		if !have[key] {
			t.Fatalf("acknowledged increment %s lost", key)
		}
	}
	if n, _ := strconv.Atoi(string(counter)); n != len(keys) {
		t.Fatalf("counter %d but %d increments' keys", n, len(keys))
	}
	if len(acked) < 4*perChild+40+75 {
		t.Fatalf("only %d acknowledged increments", len(acked))
	}
	t.Logf("%d increments from 6 processes (2 SIGKILLed), %d acknowledged", len(keys), len(acked))
}

func sharedChild(t *testing.T, spec string) {
	parts := strings.Split(spec, "|")
	n, _ := strconv.Atoi(parts[2])
	s, err := OpenSharedStore(parts[0], &SharedOptions{Options: Options{AppendLog: true, CompactEvery: 9, NoFsync: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	w := bufio.NewWriter(os.Stdout)
	for i := 0; i < n; {
		b, v, err := s.Get(ctx, "counter")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := strconv.Atoi(string(b))
		key := fmt.Sprintf("keys/%s/%d", parts[1], i)
		score := int64(c)
		err = s.Commit(ctx, []durability.Write{
			{Key: "counter", Version: v, Value: []byte(strconv.Itoa(c + 1))},
			{Key: key, Version: 0, Value: []byte("1"), Group: "keys/", Order: &score},
		})
		if errors.Is(err, durability.ErrConflict) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(w, "ack %s\n", key)
		w.Flush()
		i++
	}
}

// TestSharedLogRewrittenUnderTheReader: a log emptied and written again
// since a store last read it (its offset now falls inside a line) is read
// again from its start, never cut there.
func TestSharedLogRewrittenUnderTheReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bot.journal")
	first := `{"seq":1,"w":[{"k":"a","v":"MQ=="}]}` + "\n"
	writeLog(t, path, first)
	s, err := OpenSharedStore(path, &SharedOptions{Options: Options{AppendLog: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Another writer folds entry 1 into a snapshot and appends a longer
	// entry 2 to the emptied log.
	enc, _ := encodeSnapshot(memoryState(t, map[string]string{"a": "1"}), 1)
	os.WriteFile(path, enc, 0o600)
	second := `{"seq":2,"w":[{"k":"b","v":"MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIy"}]}` + "\n"
	writeLog(t, path, second)
	v, _, err := s.Get(context.Background(), "b")
	if err != nil || !strings.HasPrefix(string(v), "222") {
		t.Fatalf("entry 2: %q %v", v, err)
	}
	if b, _ := os.ReadFile(path + ".log"); string(b) != second {
		t.Fatalf("the log was cut: %q", b)
	}
}

func memoryState(t *testing.T, kv map[string]string) memory.State {
	m := memory.NewKv()
	for k, v := range kv {
		if err := m.Commit(context.Background(), []durability.Write{{Key: k, Version: durability.AnyVersion, Value: []byte(v)}}); err != nil {
			t.Fatal(err)
		}
	}
	return m.Export()
}

func TestSharedAckedWritesSurviveSIGKILL(t *testing.T) {
	durabilitytest.AckedWritesSurviveKill(t, "TestSharedAckedWritesSurviveSIGKILL", func(path string) (durability.Kv, error) {
		return OpenSharedStore(path, &SharedOptions{Options: Options{AppendLog: true, CompactEvery: 100}})
	})
}
