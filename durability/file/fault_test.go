package file

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/botrun/botrun/durability"
	"github.com/botrun/botrun/internal/journalfile"
	"github.com/botrun/botrun/internal/journalfile/faultfs"
	"github.com/botrun/botrun/internal/soak"
)

// faultKV is a file journal under test: the Store or the SharedStore.
type faultKV interface {
	durability.Kv
	Close() error
}

// faultConfigs are the journal's shapes: every commit, compaction and
// snapshot path is in one of them. The Store runs without its lock file, so
// that a test can open the journal again in the same process after a
// "power loss", the first store never closed.
var faultConfigs = []struct {
	name string
	open func(path string, fsys *faultfs.FS) (faultKV, error)
}{
	{"store/log", func(path string, fsys *faultfs.FS) (faultKV, error) {
		return OpenStore(path, &Options{AppendLog: true, CompactEvery: 3, FS: fsOrOS(fsys), NoLock: true})
	}},
	{"store/snapshot", func(path string, fsys *faultfs.FS) (faultKV, error) {
		return OpenStore(path, &Options{FS: fsOrOS(fsys), NoLock: true})
	}},
	{"shared/log", func(path string, fsys *faultfs.FS) (faultKV, error) {
		return OpenSharedStore(path, &SharedOptions{Options: Options{AppendLog: true, CompactEvery: 3, FS: fsOrOS(fsys)}})
	}},
	{"shared/snapshot", func(path string, fsys *faultfs.FS) (faultKV, error) {
		return OpenSharedStore(path, &SharedOptions{Options: Options{FS: fsOrOS(fsys)}})
	}},
}

// faultCommits is the workload's length: two compactions at CompactEvery 3.
const faultCommits = 7

// TestFaultAtEveryOperation fails each file operation of a workload in
// turn (every write, fsync, truncate, create, rename and directory sync of
// its commits, compactions and snapshots), with each fault that operation
// can meet, then heals the disk. Every time: no acknowledged commit is
// lost, the journal goes on taking commits in the same process (no
// restart), what it serves is what the disk holds, and it reopens, also
// after a power loss took what a failed fsync did not write.
func TestFaultAtEveryOperation(t *testing.T) {
	for _, c := range faultConfigs {
		t.Run(c.name, func(t *testing.T) {
			ops := dryRun(t, c.open)
			if len(ops) < faultCommits*2 {
				t.Fatalf("the dry run counted %d operations: %v", len(ops), ops)
			}
			runs := 0
			for i, op := range ops {
				for _, fault := range faultsFor(op.Op) {
					runs++
					name := fmt.Sprintf("%s(%s)", op, fault)
					faultRun(t, c.open, func(fs *faultfs.FS) { fs.FailAt(i+1, fault) }, 1, name)
				}
				// The disk full from this operation on: the recovery's
				// own operations fail too, until it heals.
				runs++
				faultRun(t, c.open, func(fs *faultfs.FS) { fs.FailFrom(i+1, faultfs.NoSpace) }, -1, fmt.Sprintf("%s(full from here)", op))
			}
			t.Logf("%d operations, %d faulty runs", len(ops), runs)
		})
	}
}

// TestRandomFaults runs, under make soak, 200 workloads per journal shape
// with 2 to 5 faults each, at operations and of kinds drawn at random (the
// seed printed; BOTRUN_SEED replays it), with the checks of
// TestFaultAtEveryOperation. make test runs TestFaultAtEveryOperation only.
func TestRandomFaults(t *testing.T) {
	if !soak.On() {
		t.Skip("make soak runs random faults (BOTRUN_SOAK=1); make test runs TestFaultAtEveryOperation")
	}
	rng := soak.Rand(t, "./durability/file")
	for _, c := range faultConfigs {
		t.Run(c.name, func(t *testing.T) {
			ops := dryRun(t, c.open)
			for run := range 200 {
				plan := map[int]faultfs.Fault{}
				for range 2 + rng.IntN(4) {
					i := rng.IntN(len(ops))
					kinds := faultsFor(ops[i].Op)
					plan[i+1] = kinds[rng.IntN(len(kinds))]
				}
				// A fault shifts the operations after it (a retry, a
				// recovery), so a planned number may meet another kind
				// of operation, or none: at least one is met.
				faultRun(t, c.open, func(fs *faultfs.FS) { fs.FailEach(plan) }, -1, fmt.Sprintf("run %d %v", run, plan))
			}
		})
	}
}

// dryRun runs the workload without a fault and returns the operations its
// commits made (opening the journal not counted).
func dryRun(t *testing.T, open func(string, *faultfs.FS) (faultKV, error)) []faultfs.Event {
	t.Helper()
	dry := &faultfs.FS{}
	kv, err := open(filepath.Join(t.TempDir(), "j"), dry)
	if err != nil {
		t.Fatal(err)
	}
	opened := len(dry.Ops())
	commitAll(kv, nil)
	ops := dry.Ops()[opened:]
	kv.Close()
	return ops
}

// faultsFor is the faults an operation is tried with.
func faultsFor(op faultfs.Op) []faultfs.Fault {
	switch op {
	case faultfs.Write:
		return []faultfs.Fault{faultfs.NoSpace, faultfs.Short}
	case faultfs.Sync, faultfs.SyncDir:
		return []faultfs.Fault{faultfs.EIO}
	}
	return []faultfs.Fault{faultfs.NoSpace}
}

// faultRun runs the workload with the faults inject plans (want of them
// met; -1: at least one), heals, and checks the journal.
func faultRun(t *testing.T, open func(string, *faultfs.FS) (faultKV, error), inject func(*faultfs.FS), want int, name string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j")
	fsys := &faultfs.FS{}
	kv, err := open(path, fsys)
	if err != nil {
		t.Fatalf("%s: open: %v", name, err)
	}
	inject(fsys)
	acked := map[string]bool{}
	failures := commitAll(kv, acked)
	if f := len(fsys.Failed()); f == 0 || (want >= 0 && f != want) {
		t.Fatalf("%s: the fault was not met as planned (failed %v)", name, fsys.Failed())
	}
	fsys.Heal()
	// Service resumes without a restart.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := commit(kv, "after")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no commit succeeds after the disk healed: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	acked["after"] = true
	served := snapshotOf(t, kv)
	for k := range acked {
		if served[k] == "" {
			t.Errorf("%s: acknowledged %s is not served after the fault (commit errors: %v)", name, k, failures)
		}
	}
	// The machine loses power now: the journal is not closed (a close
	// would fold memory into a new snapshot), and what a failed fsync did
	// not write is gone.
	if err := fsys.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	re, err := open(path, nil)
	if err != nil {
		t.Fatalf("%s: the journal does not reopen: %v", name, err)
	}
	defer func() {
		if err := re.Close(); err != nil {
			t.Errorf("%s: close: %v", name, err)
		}
	}()
	onDisk := snapshotOf(t, re)
	for k := range acked {
		if onDisk[k] == "" {
			t.Errorf("%s: acknowledged %s is lost after reopening", name, k)
		}
	}
	if fmt.Sprint(onDisk) != fmt.Sprint(served) {
		t.Errorf("%s: served %v, but the disk holds %v", name, served, onDisk)
	}
}

func fsOrOS(f *faultfs.FS) journalfile.FS {
	if f == nil {
		return nil
	}
	return f
}

// commitAll commits the workload's keys one by one; acked records those
// whose commit succeeded. It returns the errors.
func commitAll(kv durability.Kv, acked map[string]bool) []error {
	var errs []error
	for i := range faultCommits {
		key := fmt.Sprintf("k%d", i)
		if err := commit(kv, key); err != nil {
			errs = append(errs, err)
			continue
		}
		if acked != nil {
			acked[key] = true
		}
	}
	return errs
}

func commit(kv durability.Kv, key string) error {
	order := int64(len(key))
	return kv.Commit(context.Background(), []durability.Write{{Key: key, Version: durability.AnyVersion, Value: []byte("v-" + key), Group: "g/", Order: &order}})
}

// snapshotOf reads every key the workload may have written.
func snapshotOf(t *testing.T, kv durability.Kv) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range faultCommits + 1 {
		key := fmt.Sprintf("k%d", i)
		if i == faultCommits {
			key = "after"
		}
		v, _, err := kv.Get(context.Background(), key)
		if errors.Is(err, durability.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if v != nil {
			out[key] = string(v)
		}
	}
	return out
}

// TestFailedCompactionsUnderConcurrentCommits: 8 committers write while
// every compaction fails (its snapshot cannot be created), so lines queued
// behind a compaction are in no snapshot: none of the acknowledged commits
// may be lost at a power loss.
func TestFailedCompactionsUnderConcurrentCommits(t *testing.T) {
	for _, c := range faultConfigs {
		if c.name != "store/log" && c.name != "shared/log" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j")
			fsys := &faultfs.FS{}
			kv, err := c.open(path, fsys)
			if err != nil {
				t.Fatal(err)
			}
			// Every compaction fails; a slow disk (each append's fsync
			// takes 5 ms) queues commits behind the append it follows.
			fsys.FailOps(faultfs.Create, faultfs.NoSpace)
			fsys.Slow(faultfs.Sync, 5*time.Millisecond)
			var mu sync.Mutex
			acked := map[string]bool{}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 50 {
						key := fmt.Sprintf("g%d-%d", g, i)
						if commit(kv, key) == nil {
							mu.Lock()
							acked[key] = true
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			if len(fsys.Failed()) == 0 {
				t.Fatal("no compaction was tried")
			}
			// The power fails before any compaction succeeds (one
			// would write everything in memory to a snapshot): the
			// acknowledged commits must be in the log.
			if err := fsys.PowerLoss(); err != nil {
				t.Fatal(err)
			}
			re, err := c.open(path, nil)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer re.Close()
			lost := 0
			for k := range acked {
				if v, _, err := re.Get(context.Background(), k); err != nil || v == nil {
					lost++
				}
			}
			if lost > 0 {
				t.Errorf("%d of %d acknowledged commits lost (%d compactions failed)", lost, len(acked), len(fsys.Failed()))
			}
		})
	}
}
