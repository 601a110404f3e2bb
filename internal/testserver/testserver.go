// Package testserver gives tests a real PostgreSQL and Redis: the servers
// named by BOTRUN_TEST_POSTGRES_URL and BOTRUN_TEST_REDIS_URL (what .ci/run
// starts), or throwaway servers it starts itself from the machine's binaries.
// Without either, a test skips with a loud message; under CI=true a skip is a
// failure, so a missing install step cannot pass unnoticed.
package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	mu       sync.Mutex
	started  []func()
	pgURL    string
	pgErr    error
	redisURL string
	redisErr error
	pgOnce   sync.Once
	redOnce  sync.Once
)

// Run runs a package's tests and stops the servers this package started.
// Call it from TestMain: os.Exit(testserver.Run(m)).
func Run(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	for _, stop := range started {
		stop()
	}
	return code
}

func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	msg := fmt.Sprintf("%s is not available: %v", what, err)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: a skipped server test is a failure; .ci/run must install and start it)", msg)
	}
	t.Skipf("SKIPPING: %s (install it, or set its BOTRUN_TEST_*_URL)", msg)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Postgres returns a PostgreSQL URL.
func Postgres(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("BOTRUN_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	pgOnce.Do(func() { pgURL, pgErr = startPostgres() })
	if pgErr != nil {
		unavailable(t, "PostgreSQL", pgErr)
	}
	return pgURL
}

func startPostgres() (string, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			bins = []string{p}
		} else {
			return "", fmt.Errorf("no initdb (apt-get install postgresql)")
		}
	}
	sort.Strings(bins)
	bin := filepath.Dir(bins[len(bins)-1])
	port, err := freePort()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "botrun-pg-")
	if err != nil {
		return "", err
	}
	var as []string // initdb refuses root: run as postgres
	if u, _ := user.Current(); u != nil && u.Uid == "0" {
		as = []string{"runuser", "-u", "postgres", "--"}
		if err := exec.Command("chown", "postgres:postgres", dir).Run(); err != nil {
			return "", fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	run := func(args ...string) error {
		cmd := exec.Command(append(as, args...)[0], append(as, args...)[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := run(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		return "", err
	}
	if err := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "30",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=300", port, dir), "start"); err != nil {
		return "", err
	}
	mu.Lock()
	started = append(started, func() {
		run(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
		os.RemoveAll(dir)
	})
	mu.Unlock()
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), nil
}

// Redis returns a Redis URL.
func Redis(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("BOTRUN_TEST_REDIS_URL"); u != "" {
		return u
	}
	redOnce.Do(func() { redisURL, redisErr = startRedis() })
	if redisErr != nil {
		unavailable(t, "Redis", redisErr)
	}
	return redisURL
}

func startRedis() (string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("no redis-server (apt-get install redis-server)")
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "botrun-redis-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
		"--appendfsync", "everysec", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return "", fmt.Errorf("redis-server did not listen: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	started = append(started, func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	})
	mu.Unlock()
	return fmt.Sprintf("redis://127.0.0.1:%d/0", port), nil
}
