package testserver

import (
	"bufio"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServersDieWithTheTestBinary starts PostgreSQL and Redis in a child test
// binary, SIGKILLs the child, and waits for both servers to stop listening: a
// killed test run must leave no server behind.
func TestServersDieWithTheTestBinary(t *testing.T) {
	if os.Getenv("BOTRUN_TESTSERVER_CHILD") == "1" {
		pg, err := startPostgres()
		if err != nil {
			t.Fatal(err)
		}
		red, err := startRedis()
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("servers " + pg + " " + red + "\n")
		select {} // until killed
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "Redis", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServersDieWithTheTestBinary$", "-test.timeout=5m")
	cmd.Env = []string{"BOTRUN_TESTSERVER_CHILD=1", "PATH=" + os.Getenv("PATH"), "TMPDIR=" + os.TempDir()}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "servers" {
			for _, u := range f[1:] {
				pu, err := url.Parse(u)
				if err != nil {
					t.Fatal(err)
				}
				addrs = append(addrs, pu.Host)
			}
			break
		}
	}
	if len(addrs) != 2 {
		cmd.Process.Kill()
		cmd.Wait()
		unavailable(t, "PostgreSQL and Redis (the child could not start them)", sc.Err())
	}
	for _, a := range addrs {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatalf("%s is not listening while the child lives: %v", a, err)
		}
		c.Close()
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, a := range addrs {
		if err := waitFor(2*time.Minute, func() bool {
			c, err := net.Dial("tcp", a)
			if err == nil {
				c.Close()
			}
			return err != nil
		}); err != nil {
			t.Errorf("the server on %s outlived the killed test binary: %v", a, err)
		}
	}
}

// TestFreePortsBelowTheEphemeralRange: ports a connect probe cannot vouch
// for (an outgoing connection's local port) are never picked.
func TestFreePortsBelowTheEphemeralRange(t *testing.T) {
	ports, err := freePorts(12)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < portLow || p >= portHigh || p >= 32768 || seen[p] {
			t.Fatalf("port %d: want distinct ports in [%d, %d), below the ephemeral range", p, portLow, portHigh)
		}
		seen[p] = true
	}
}
