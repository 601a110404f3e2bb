package durabilitytest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/botrun/botrun/durability"
)

const ackChildEnv = "BOTRUN_ACK_CHILD"

// AckedWritesSurviveKill proves a Kv acknowledges no write early: a child
// process (this test binary, re-run) commits from many goroutines and prints
// each key once its Commit returned; the parent SIGKILLs it right after an ack,
// reopens the store, and requires every acknowledged key to be there. Call it
// from a test named testName; open opens the store at a path.
func AckedWritesSurviveKill(t *testing.T, testName string, open func(path string) (durability.Kv, error)) {
	if path := os.Getenv(ackChildEnv); path != "" {
		ackChild(path, open)
		return
	}
	path := t.TempDir() + "/store"
	acked := map[string]bool{}
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^"+testName+"$")
		cmd.Env = append(os.Environ(), ackChildEnv+"="+path, "BOTRUN_ACK_ROUND="+strconv.Itoa(round))
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		stopAt := 50 + 37*round
		n := 0
		for sc.Scan() {
			if key, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
				acked[key] = true
				n++
				if n == stopAt {
					cmd.Process.Signal(syscall.SIGKILL) // right after an ack
					break
				}
			}
		}
		cmd.Wait()
		if n < stopAt {
			t.Fatalf("round %d: the child stopped after %d acks", round, n)
		}
		kv, err := open(path)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		for key := range acked {
			if _, v, err := kv.Get(context.Background(), key); err != nil || v == 0 {
				t.Fatalf("round %d: acknowledged key %s lost (%v)", round, key, err)
			}
		}
		kv.Close()
	}
	t.Logf("%d acknowledged writes survived 5 SIGKILLs", len(acked))
}

func ackChild(path string, open func(string) (durability.Kv, error)) {
	kv, err := open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	round := os.Getenv("BOTRUN_ACK_ROUND")
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("r%s/g%d/%d", round, g, i)
				score := int64(i)
				err := kv.Commit(context.Background(), []durability.Write{{Key: key, Version: 0, Value: []byte(key), Group: "acks/", Order: &score}})
				if err != nil {
					fmt.Fprintln(os.Stderr, "child commit:", err)
					os.Exit(4)
				}
				mu.Lock()
				fmt.Fprintf(w, "ack %s\n", key)
				w.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
