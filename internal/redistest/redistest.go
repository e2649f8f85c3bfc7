// Package redistest starts throw-away redis-server processes for tests: each
// on a free loopback port, without persistence, in its own temporary folder,
// alone (Start), as the nodes of a Redis Cluster (StartCluster) or as a
// primary, its replicas and the Sentinels that watch them (StartSentinel).
// It never touches a Redis it did not start (and never ports 6379 or 26379,
// which a developer's own Redis and Sentinel may use). It speaks RESP
// itself, so tests that import it do not link a Redis client. It is imported
// only by tests.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/testproc"
)

// readyTimeout bounds how long Start waits for a new server to answer; a
// loaded 2-core machine can take a while to exec redis-server.
const readyTimeout = 15 * time.Second

// stopTimeout is how long Stop waits after SIGTERM before it SIGKILLs.
const stopTimeout = 10 * time.Second

// pollInterval is how often a start-up or failover wait asks the servers
// whether they are ready: often enough that the wait ends soon after they
// are, rare enough that asking costs nothing on a loaded machine.
const pollInterval = 50 * time.Millisecond

// ioTimeout bounds every exchange Do and the readiness probe have with the
// server, so that a frozen server cannot hang a test.
const ioTimeout = 5 * time.Second

// Options configure a test server.
type Options struct {
	// Args are extra redis-server arguments, e.g. "--requirepass", "pw" or
	// "--rename-command", "EVAL", "". When they set --requirepass, Do
	// authenticates with it.
	Args []string
}

// mode is what a redis-server process runs as.
type mode int

const (
	standalone   mode = iota
	clusterNode       // cluster mode, with nodes.conf and a bus port
	sentinelNode      // Sentinel mode, with a config file it rewrites
)

// Server is a running redis-server started by Start, or one of the servers
// of a Cluster or of a Sentinel topology.
type Server struct {
	Addr string // 127.0.0.1:PORT
	URL  string // redis://127.0.0.1:PORT/0 (without any password)

	opts     Options
	mode     mode
	port     int
	busPort  int // cluster bus port; 0 when not in cluster mode
	dir      string
	password string
	cmd      *exec.Cmd
	done     <-chan struct{} // closed when cmd has been waited for
}

// Start runs a redis-server on a free loopback port and returns once it
// answers. The caller must Stop it.
func Start(opts Options) (*Server, error) {
	return startServer(opts, standalone, "")
}

// startServer is Start for a server that runs as m. A cluster node keeps its
// nodes.conf in its own folder and runs its cluster bus on a second free
// port. A Sentinel gets conf as its config file, written to its folder once
// here and not by launch, so that a Restart keeps what the Sentinel has
// rewritten there since (its epochs and the replicas and Sentinels it knows).
func startServer(opts Options, m mode, conf string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("redis-server not found: run make deps")
	}
	n := 1
	if m == clusterNode {
		n = 2
	}
	ports, err := testproc.FreePorts(n)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	port := ports[0]
	s := &Server{
		Addr:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		URL:      fmt.Sprintf("redis://127.0.0.1:%d/0", port),
		opts:     opts,
		mode:     m,
		port:     port,
		dir:      dir,
		password: requirePass(opts.Args),
	}
	if m == clusterNode {
		s.busPort = ports[1]
	}
	if m == sentinelNode {
		if err := os.WriteFile(s.sentinelConf(), []byte(conf), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: sentinel config: %w", err)
		}
	}
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// launch starts redis-server on s.port and waits until it answers.
func (s *Server) launch() error {
	var args []string
	if s.mode == sentinelNode {
		// The config file must come first; Sentinel refuses to start
		// without one, as it saves its state there.
		args = append(args, s.sentinelConf(), "--sentinel")
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	)
	if s.mode == clusterNode {
		// --cluster-port is explicit because the default, port+10000, is
		// past 65535 for a quarter of Linux's ephemeral ports, and nobody
		// checked that it was free.
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	args = append(args, s.opts.Args...)
	// Not redis-sentinel even for a Sentinel: that is the same binary under
	// another name, which Debian ships in a package of its own.
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = procAttr()
	logPath := filepath.Join(s.dir, "redis.log")
	done, err := testproc.Launch(cmd, logPath)
	if err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	s.cmd, s.done = cmd, done
	if err := s.waitReady(); err != nil {
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("%w; redis-server log: %s", err, testproc.Tail(logPath))
	}
	return nil
}

// sentinelConf is the path of a Sentinel's config file.
func (s *Server) sentinelConf() string {
	return filepath.Join(s.dir, "sentinel.conf")
}

// exited reports whether the server's process has exited (been killed or
// stopped) and not been restarted.
func (s *Server) exited() bool { return testproc.Exited(s.done) }

// waitReady dials and PINGs until the server answers, the process exits, or
// readyTimeout passes. Any reply counts, NOAUTH included: the server is up.
func (s *Server) waitReady() error {
	what := fmt.Sprintf("redistest: redis-server on port %d", s.port)
	return testproc.WaitReady(what, s.done, readyTimeout, 10*time.Millisecond, func() error {
		conn, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(ioTimeout))
		_, err = roundTrip(bufio.NewReader(conn), conn, []string{"PING"})
		if reply := replyError(""); errors.As(err, &reply) {
			return nil
		}
		return err
	})
}

// PID is the process ID of the redis-server running now (a Restart
// starts another).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop terminates the server (SIGTERM, then SIGKILL if it lingers) and
// removes its folder. It thaws a frozen server first so SIGTERM is handled.
func (s *Server) Stop() error {
	testproc.Stop(s.cmd.Process, s.done, syscall.SIGTERM, stopTimeout)
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("redistest: remove %s: %w", s.dir, err)
	}
	return nil
}

// Kill SIGKILLs the server and waits for it to exit; its folder stays for
// Restart or Stop.
func (s *Server) Kill() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("redistest: kill redis-server: %w", err)
	}
	<-s.done
	return nil
}

// Freeze stops the server with SIGSTOP: connections stay open, nothing
// answers, as with a network partition or a long pause.
func (s *Server) Freeze() error {
	if err := testproc.Freeze(s.cmd.Process.Pid); err != nil {
		return fmt.Errorf("redistest: freeze redis-server: %w", err)
	}
	return nil
}

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() error {
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redistest: thaw redis-server: %w", err)
	}
	return nil
}

// Restart kills the server and starts a new, empty one on the same port
// with the same arguments, as a Redis without persistence that restarts. A
// cluster node keeps its nodes.conf, and so its place in the cluster; a
// Sentinel keeps its config file, and so what it knew of the topology.
func (s *Server) Restart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.launch()
}

// Do sends one command on a short-lived connection and returns the reply: a
// status, bulk string or integer as text, an array as its elements joined by
// newlines, a nil reply as "". A Redis error reply is returned as an error.
func (s *Server) Do(args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", s.Addr, ioTimeout)
	if err != nil {
		return "", fmt.Errorf("redistest: dial %s: %w", s.Addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(ioTimeout))
	r := bufio.NewReader(conn)
	if s.password != "" {
		if _, err := roundTrip(r, conn, []string{"AUTH", s.password}); err != nil {
			return "", fmt.Errorf("redistest: AUTH: %w", err)
		}
	}
	reply, err := roundTrip(r, conn, args)
	if err != nil {
		return "", fmt.Errorf("redistest: %s: %w", strings.ToUpper(args[0]), err)
	}
	return reply, nil
}

// replyError is an error reply from Redis.
type replyError string

func (e replyError) Error() string { return string(e) }

// roundTrip writes one command in RESP and reads its reply.
func roundTrip(r *bufio.Reader, conn net.Conn, args []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(r)
}

// readReply parses one RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+', ':':
		return body, nil
	case '-':
		return "", replyError(body)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", body)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", fmt.Errorf("bad array length %q", body)
		}
		elems := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
			e, err := readReply(r)
			if err != nil {
				return "", err
			}
			elems = append(elems, e)
		}
		return strings.Join(elems, "\n"), nil
	default:
		return "", fmt.Errorf("unknown reply type %q", line[0])
	}
}

// requirePass returns the value of --requirepass in args, if any.
func requirePass(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			return args[i+1]
		}
	}
	return ""
}
