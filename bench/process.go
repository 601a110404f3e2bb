package bench

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is a bot started as its own process, serving the webchat API.
type Server struct {
	// URL is its base URL.
	URL    string
	pid    int
	exited chan error
	log    string
}

// FreeAddr returns a loopback address nothing listens on.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Start runs argv with its output in logPath and waits until its webchat
// provider answers at addr.
func Start(argv []string, addr, provider, logPath string) (*Server, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	s := &Server{URL: "http://" + addr, pid: cmd.Process.Pid, exited: make(chan error, 1), log: logPath}
	go func() { s.exited <- cmd.Wait() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(s.URL + "/webchat/" + provider + "/messages?chat=ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case err := <-s.exited:
			if err == nil {
				err = errors.New("exit status 0")
			}
			return nil, fmt.Errorf("%s exited before serving: %w: %s", argv[0], err, tail(logPath))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			return nil, fmt.Errorf("%s did not serve %s within 2 minutes: %s", argv[0], s.URL, tail(logPath))
		}
	}
}

// Memory reads the process's resident set now and at its peak, in bytes.
func (s *Server) Memory() (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		return 0, 0, fmt.Errorf("memory of pid %d: %w", s.pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, v, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("memory of pid %d: %s: %w", s.pid, line, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

// Stop ends the process with SIGTERM (SIGKILL after a minute) and waits.
func (s *Server) Stop() error {
	syscall.Kill(s.pid, syscall.SIGTERM)
	select {
	case <-s.exited:
		return nil
	case <-time.After(time.Minute):
		syscall.Kill(s.pid, syscall.SIGKILL)
		<-s.exited
		return fmt.Errorf("pid %d ignored SIGTERM for a minute: %s", s.pid, tail(s.log))
	}
}

// Pid is the process id.
func (s *Server) Pid() int { return s.pid }

// tail returns the last lines of a log, for an error.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
