// Package testserver gives tests a real PostgreSQL, Redis and Redis Cluster:
// the servers named by BOTRUN_TEST_POSTGRES_URL, BOTRUN_TEST_REDIS_URL and
// BOTRUN_TEST_REDIS_CLUSTER (what .ci/run starts), or throwaway servers it
// starts itself from the machine's binaries.
// Without either, a test skips with a loud message; under CI=true a skip is a
// failure, so a missing install step cannot pass unnoticed.
package testserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/botrun/botrun/internal/waitfor"
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

	clusterSeeds []string
	clusterErr   error
	clusterOnce  sync.Once
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

// Ports are picked below the kernel's ephemeral range (32768 up by default),
// where an outgoing connection may hold a port that a probe cannot see, and a
// server that fails to bind anyway is started again on other ports.
const (
	portLow  = 20000
	portHigh = 32000
	starts   = 5
)

// freePorts returns n distinct ports that were bindable a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free port in %d-%d", portLow, portHigh)
		}
		p := portLow + rand.IntN(portHigh-portLow)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		defer ln.Close() // held until all are picked: no port twice
		ports = append(ports, p)
	}
	return ports, nil
}

// dieWithTest makes cmd's process get SIGKILL when the test binary dies, so
// a killed test run leaves no server behind.
func dieWithTest(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// retry runs start up to starts times (each picks its own ports).
func retry[T any](start func() (T, error)) (v T, err error) {
	for range starts {
		if v, err = start(); err == nil {
			return v, nil
		}
	}
	return v, err
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
	dir, err := os.MkdirTemp("", "botrun-pg-")
	if err != nil {
		return "", err
	}
	// initdb and postgres refuse root: run them as the postgres user.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", fmt.Errorf("PostgreSQL refuses to run as root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		return cmd
	}
	data := filepath.Join(dir, "data")
	if out, err := command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("initdb: %w\n%s", err, out)
	}
	u, err := retry(func() (string, error) {
		ports, err := freePorts(1)
		if err != nil {
			return "", err
		}
		// postgres itself, not pg_ctl (which daemonizes): a child that dies
		// with the test binary.
		cmd := command("postgres", "-D", data, "-p", fmt.Sprint(ports[0]), "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300")
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		// SIGINT: PostgreSQL's fast shutdown.
		// Listening is not ready: a starting PostgreSQL accepts a connection
		// and answers "the database system is starting up"; pg_isready
		// exits 0 only once it accepts sessions.
		ready := func() bool {
			return exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", fmt.Sprint(ports[0]), "-U", "postgres", "-d", "postgres").Run() == nil
		}
		if err := serve(cmd, addr, 60*time.Second, syscall.SIGINT, ready, func() { os.RemoveAll(dir) }); err != nil {
			return "", err
		}
		return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr), nil
	})
	if err != nil {
		os.RemoveAll(dir)
	}
	return u, err
}

// serve starts cmd, a server that dies with the test binary, and waits until
// it listens on addr and ready (nil: listening is ready) says so; Run stops
// it with sig (then calls cleanup) after the package's tests.
func serve(cmd *exec.Cmd, addr string, timeout time.Duration, sig os.Signal, ready func() bool, cleanup func()) error {
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	if err := waitListening(addr, exited, timeout, ready); err != nil {
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("%s on %s: %w\n%s", filepath.Base(cmd.Path), addr, err, log.String())
	}
	mu.Lock()
	started = append(started, func() {
		cmd.Process.Signal(sig)
		<-exited
		cleanup()
	})
	mu.Unlock()
	return nil
}

// waitListening waits until addr accepts a connection and ready (when not
// nil) is true, the process behind it exited, or timeout passed.
func waitListening(addr string, exited <-chan struct{}, timeout time.Duration, ready func() bool) error {
	var err error
	ok := waitFor(timeout, func() bool {
		select {
		case <-exited:
			err = fmt.Errorf("exited before listening")
			return true
		default:
		}
		c, derr := net.Dial("tcp", addr)
		if derr != nil {
			return false
		}
		c.Close()
		return ready == nil || ready()
	})
	if ok != nil {
		return ok
	}
	return err
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
	return retry(func() (string, error) {
		ports, err := freePorts(1)
		if err != nil {
			return "", err
		}
		dir, err := os.MkdirTemp("", "botrun-redis-")
		if err != nil {
			return "", err
		}
		cmd := exec.Command(bin, "--port", fmt.Sprint(ports[0]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
			"--appendfsync", "everysec", "--dir", dir)
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		if err := serve(cmd, addr, 30*time.Second, syscall.SIGKILL, nil, func() { os.RemoveAll(dir) }); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
		return "redis://" + addr + "/0", nil
	})
}

// RedisCluster returns the seed addresses (host:port) of a Redis Cluster of
// three masters, each with a replica.
func RedisCluster(t testing.TB) []string {
	t.Helper()
	if s := os.Getenv("BOTRUN_TEST_REDIS_CLUSTER"); s != "" {
		return strings.Split(s, ",")
	}
	clusterOnce.Do(func() {
		var c *Cluster
		if c, clusterErr = startRedisCluster(); clusterErr == nil {
			clusterSeeds = c.Addrs
			mu.Lock()
			started = append(started, c.stop)
			mu.Unlock()
		}
	})
	if clusterErr != nil {
		unavailable(t, "Redis Cluster", clusterErr)
	}
	return clusterSeeds
}

// Cluster is a Redis Cluster started for one test, which may kill its nodes.
type Cluster struct {
	// Addrs are its six nodes (host:port).
	Addrs []string
	nodes map[string]*exec.Cmd
	stop  func()
}

// StartRedisCluster starts a Redis Cluster of three masters, each with a
// replica, for t alone; it is stopped when t ends.
func StartRedisCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startRedisCluster()
	if err != nil {
		unavailable(t, "Redis Cluster", err)
	}
	t.Cleanup(c.stop)
	return c
}

// StartRedisClusterFronted is StartRedisCluster whose nodes announce the
// addresses front returns for them (front is called with each node's own
// address: a test starts a proxy there and returns its address), so every
// client, and each replica's link to its master, goes through the fronts;
// the cluster bus stays direct (a partition between a client and the
// cluster does not make the nodes fail over). Addrs are the fronts.
func StartRedisClusterFronted(t testing.TB, front func(addr string) (string, error)) *Cluster {
	t.Helper()
	c, err := retry(func() (*Cluster, error) { return startRedisClusterOnce(front) })
	if err != nil {
		unavailable(t, "Redis Cluster", err)
	}
	t.Cleanup(c.stop)
	return c
}

// Kill SIGKILLs the node at addr.
func (c *Cluster) Kill(addr string) error {
	n, ok := c.nodes[addr]
	if !ok {
		return fmt.Errorf("no node %s in %v", addr, c.Addrs)
	}
	return n.Process.Kill()
}

// startRedisCluster starts a cluster; a port picked free may be taken before
// a node binds it, so it tries again on others.
func startRedisCluster() (*Cluster, error) {
	return retry(func() (*Cluster, error) { return startRedisClusterOnce(nil) })
}

// startRedisClusterOnce starts six cluster-enabled redis-servers with AOF,
// joins them as three masters with a replica each and waits for
// cluster_state:ok on every node. With front, each node announces the
// address front gives it (StartRedisClusterFronted).
func startRedisClusterOnce(front func(addr string) (string, error)) (*Cluster, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no redis-server (apt-get install redis-server)")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("no redis-cli (apt-get install redis-tools)")
	}
	// Each node's cluster bus gets a port of its own: the default, port +
	// 10000, may be taken or out of range.
	ports, err := freePorts(12)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "botrun-redis-cluster-")
	if err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	nodes := map[string]*exec.Cmd{}
	exited := make(chan error, 6)
	stop := func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
		for range cmds {
			<-exited
		}
		os.RemoveAll(dir)
	}
	var addrs []string
	for i := range 6 {
		node := filepath.Join(dir, fmt.Sprint(i))
		if err := os.Mkdir(node, 0o700); err != nil {
			stop()
			return nil, err
		}
		args := []string{"--port", fmt.Sprint(ports[2*i]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
			"--appendfsync", "everysec", "--dir", node, "--cluster-enabled", "yes", "--cluster-port", fmt.Sprint(ports[2*i+1]),
			"--cluster-node-timeout", "2000", "--cluster-config-file", "nodes.conf", "--logfile", "redis.log"}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[2*i])
		if front != nil {
			fa, err := front(addr)
			if err != nil {
				stop()
				return nil, fmt.Errorf("fronting %s: %w", addr, err)
			}
			host, port, err := net.SplitHostPort(fa)
			if err != nil {
				stop()
				return nil, fmt.Errorf("front of %s: %w", addr, err)
			}
			args = append(args, "--cluster-announce-ip", host, "--cluster-announce-port", port, "--cluster-announce-bus-port", fmt.Sprint(ports[2*i+1]))
			addr = fa
		}
		cmd := exec.Command(bin, args...)
		dieWithTest(cmd)
		if err := cmd.Start(); err != nil {
			stop()
			return nil, err
		}
		cmds = append(cmds, cmd)
		go func() { exited <- cmd.Wait() }()
		addrs = append(addrs, addr)
		nodes[addr] = cmd
	}
	for i, a := range addrs {
		if err := waitFor(30*time.Second, func() bool {
			out, _ := exec.Command(cli, "-u", "redis://"+a, "ping").Output()
			return strings.TrimSpace(string(out)) == "PONG"
		}); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, fmt.Sprint(i), "redis.log"))
			stop()
			return nil, fmt.Errorf("redis-server %s did not answer: %w\n%s", a, err, log)
		}
	}
	create := append([]string{"--cluster", "create"}, addrs...)
	if out, err := exec.Command(cli, append(create, "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput(); err != nil {
		stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := WaitClusterOK(addrs, 60*time.Second); err != nil {
		stop()
		return nil, err
	}
	return &Cluster{Addrs: addrs, nodes: nodes, stop: stop}, nil
}

// WaitClusterOK waits until every node of addrs reports cluster_state:ok,
// agrees that three masters serve the slots, and every replica's link to its
// master is up (a replica that never synced cannot take over).
func WaitClusterOK(addrs []string, timeout time.Duration) error {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return fmt.Errorf("no redis-cli (apt-get install redis-tools)")
	}
	return waitFor(timeout, func() bool {
		for _, a := range addrs {
			out, err := exec.Command(cli, "-u", "redis://"+a, "cluster", "info").Output()
			if err != nil || !strings.Contains(string(out), "cluster_state:ok") || !strings.Contains(string(out), "cluster_size:3") {
				return false
			}
			out, err = exec.Command(cli, "-u", "redis://"+a, "info", "replication").Output()
			if err != nil || strings.Contains(string(out), "role:slave") && !strings.Contains(string(out), "master_link_status:up") {
				return false
			}
		}
		return true
	})
}

// waitFor polls ok until it holds or timeout passes.
func waitFor(timeout time.Duration, ok func() bool) error {
	if !waitfor.Every(50*time.Millisecond, timeout, ok) {
		return fmt.Errorf("not ready within %s", timeout)
	}
	return nil
}
