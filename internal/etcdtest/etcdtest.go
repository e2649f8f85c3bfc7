// Package etcdtest starts throw-away etcd members for tests: each on free
// loopback ports (client and peer), with a data folder of its own under the
// system's temporary folder, alone (Start) or as a cluster of several
// (StartCluster). It never touches an etcd it did not start (and never the
// standard ports 2379 and 2380), and it ends only the processes it started,
// by their PID. It speaks etcd's JSON gateway itself, so tests that import
// it link no etcd client. It is imported only by tests.
package etcdtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/internal/testproc"
)

// readyTimeout bounds how long a start waits for the members to elect a
// leader and answer; a loaded 2-core machine can take a while to exec and
// elect.
const readyTimeout = 30 * time.Second

// stopTimeout is how long Stop waits after SIGTERM before it SIGKILLs.
const stopTimeout = 10 * time.Second

// ioTimeout bounds every request the package makes itself, so that a frozen
// member cannot hang a test.
const ioTimeout = 5 * time.Second

// Options configure the members of a test cluster.
type Options struct {
	// Members is the number of members; 0 means 1.
	Members int
	// Args are extra etcd arguments for every member, after (and so
	// overriding) those the package sets, e.g. "--auth-token", "simple".
	Args []string
	// TLS, when set, makes the members serve their clients over TLS.
	TLS *TLS
}

// TLS is the members' client TLS: their certificate and, to require client
// certificates, the CA that signs them; and the client certificate the
// package's own requests present.
type TLS struct {
	CertFile, KeyFile             string // the members' certificate and key
	ClientCAFile                  string // when set, clients must present a certificate it signed
	ClientCertFile, ClientKeyFile string // presented by Do
}

// Member is one running etcd process of a Cluster.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:PORT, https:// with Options.TLS
	PeerURL   string // http://127.0.0.1:PORT

	c    *Cluster
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// Cluster is a set of etcd members started together by Start or
// StartCluster.
type Cluster struct {
	Members []*Member

	opts    Options
	client  *http.Client // for Do: TLS when the members serve it
	root    string
	initial string // --initial-cluster
	token   string // --initial-cluster-token
}

// Start runs a single-member etcd and returns once it answers. The caller
// must Stop it.
func Start(opts Options) (*Cluster, error) {
	opts.Members = 1
	return StartCluster(opts)
}

// StartCluster runs opts.Members members that form one cluster and returns
// once every member answers a linearizable read. The caller must Stop it.
func StartCluster(opts Options) (*Cluster, error) {
	if opts.Members == 0 {
		opts.Members = 1
	}
	if opts.Members < 1 {
		return nil, fmt.Errorf("etcdtest: a cluster needs at least one member, not %d", opts.Members)
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return nil, errors.New("etcd not found (Debian package etcd-server): run make deps")
	}
	root, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, fmt.Errorf("etcdtest: temp dir: %w", err)
	}
	ports, err := testproc.FreePorts(2 * opts.Members)
	if err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	c := &Cluster{opts: opts, root: root, token: filepath.Base(root), client: plainClient}
	scheme := "http"
	if t := opts.TLS; t != nil {
		scheme = "https"
		if c.client, err = tlsClient(t); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	var initial []string
	for i := range opts.Members {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			c:         c,
			dir:       filepath.Join(root, fmt.Sprintf("m%d", i)),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	c.initial = strings.Join(initial, ",")
	for _, m := range c.Members {
		if err := m.launch("new"); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitReady(); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// launch starts the member's etcd process; state is the
// --initial-cluster-state ("new" the first time; a member restarted on its
// data folder ignores it).
func (m *Member) launch(state string) error {
	args := []string{
		"--name", m.Name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", m.c.initial,
		"--initial-cluster-token", m.c.token,
		"--initial-cluster-state", state,
		"--log-outputs", filepath.Join(m.c.root, m.Name+".log"),
		"--logger", "zap",
	}
	if t := m.c.opts.TLS; t != nil {
		args = append(args, "--cert-file", t.CertFile, "--key-file", t.KeyFile)
		if t.ClientCAFile != "" {
			args = append(args, "--client-cert-auth", "--trusted-ca-file", t.ClientCAFile)
		}
	}
	args = append(args, m.c.opts.Args...)
	cmd := exec.Command("etcd", args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = procAttr()
	// The Go runtime's own environment must not leak into etcd's (GODEBUG,
	// GOMAXPROCS set for the test); etcd reads ETCD_* variables too.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + m.c.root}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start etcd %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	m.cmd, m.done = cmd, done
	return nil
}

// WaitReady waits until every running member answers a linearizable read,
// which needs an elected leader and a quorum.
func (c *Cluster) WaitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		for {
			err := m.Do(ctx, "/v3/kv/range", map[string]any{"key": []byte("etcdtest-ready")}, nil)
			if err == nil {
				break
			}
			select {
			case <-m.done:
				return fmt.Errorf("etcdtest: etcd %s exited during start-up: %s", m.Name, m.tail())
			case <-ctx.Done():
				return fmt.Errorf("etcdtest: etcd %s not ready after %s: %v; log: %s", m.Name, readyTimeout, err, m.tail())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Endpoints returns the members' client addresses, host:port, comma
// separated, as an etcd:// store URL takes them.
func (c *Cluster) Endpoints() string {
	var list []string
	for _, m := range c.Members {
		_, hostPort, _ := strings.Cut(m.ClientURL, "://")
		list = append(list, hostPort)
	}
	return strings.Join(list, ",")
}

// URL is the store URL of every member: etcd://host:port,host:port,...
// (etcds:// when they serve TLS, without the files it needs).
func (c *Cluster) URL() string {
	if c.opts.TLS != nil {
		return "etcds://" + c.Endpoints()
	}
	return "etcd://" + c.Endpoints()
}

// Leader returns the member the running members agree leads the cluster.
func (c *Cluster) Leader(ctx context.Context) (*Member, error) {
	for {
		var firstErr error
		for _, m := range c.Members {
			if !m.Running() {
				continue
			}
			var st struct {
				Header struct {
					MemberID uint64 `json:"member_id,string"`
				} `json:"header"`
				Leader uint64 `json:"leader,string"`
			}
			if err := m.Do(ctx, "/v3/maintenance/status", map[string]any{}, &st); err != nil {
				firstErr = err
				continue
			}
			if st.Leader == 0 {
				continue
			}
			for _, l := range c.Members {
				if l.Running() && l.id(ctx) == st.Leader {
					return l, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdtest: no leader: %w (last error: %v)", ctx.Err(), firstErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// id is the member's ID, 0 if it does not answer.
func (m *Member) id(ctx context.Context) uint64 {
	var st struct {
		Header struct {
			MemberID uint64 `json:"member_id,string"`
		} `json:"header"`
	}
	if err := m.Do(ctx, "/v3/maintenance/status", map[string]any{}, &st); err != nil {
		return 0
	}
	return st.Header.MemberID
}

// Stop stops every member (SIGTERM, then SIGKILL if one lingers) and
// removes the cluster's folder.
func (c *Cluster) Stop() error {
	for _, m := range c.Members {
		m.stop()
	}
	if err := os.RemoveAll(c.root); err != nil {
		return fmt.Errorf("etcdtest: remove %s: %w", c.root, err)
	}
	return nil
}

// Restart stops every member and starts them again on their data, as a
// whole cluster restarting after a power cut, and waits until it answers.
func (c *Cluster) Restart() error {
	for _, m := range c.Members {
		if err := m.Kill(); err != nil {
			return err
		}
	}
	for _, m := range c.Members {
		if err := m.launch("existing"); err != nil {
			return err
		}
	}
	return c.WaitReady()
}

// Running reports whether the member's process is alive (frozen counts).
func (m *Member) Running() bool {
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// PID is the member's process ID.
func (m *Member) PID() int { return m.cmd.Process.Pid }

// stop terminates the member, thawing it first so that SIGTERM is handled.
func (m *Member) stop() {
	if m.Running() {
		testproc.Stop(m.cmd.Process, m.done, syscall.SIGTERM, stopTimeout)
	}
}

// Kill SIGKILLs the member and waits for it to exit; its data stays for
// Restart.
func (m *Member) Kill() error {
	if !m.Running() {
		return nil
	}
	if err := m.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("etcdtest: kill etcd %s: %w", m.Name, err)
	}
	<-m.done
	return nil
}

// Freeze stops the member with SIGSTOP: its connections stay open and
// nothing answers, as with a partition or a long pause.
func (m *Member) Freeze() error {
	if err := testproc.Freeze(m.cmd.Process.Pid); err != nil {
		return fmt.Errorf("etcdtest: freeze etcd %s: %w", m.Name, err)
	}
	return nil
}

// Thaw resumes a frozen member with SIGCONT.
func (m *Member) Thaw() error {
	if err := m.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("etcdtest: thaw etcd %s: %w", m.Name, err)
	}
	return nil
}

// Restart starts a killed or stopped member again on its data folder,
// rejoining the cluster, and waits until it answers.
func (m *Member) Restart() error {
	if err := m.Kill(); err != nil {
		return err
	}
	if err := m.launch("existing"); err != nil {
		return err
	}
	return m.c.WaitReady()
}

// Do posts body as JSON to the member's gateway path (e.g. "/v3/kv/put")
// and decodes the answer into out (when not nil). An error answer is
// returned as an error holding etcd's message.
func (m *Member) Do(ctx context.Context, path string, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.ClientURL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.c.client.Do(req)
	if err != nil {
		return fmt.Errorf("etcdtest: %s%s: %w", m.Name, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("etcdtest: %s%s: %w", m.Name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcdtest: %s%s: %s: %s", m.Name, path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// plainClient is the package's HTTP client for members without TLS; no
// proxy, whatever the environment.
var plainClient = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}

// tlsClient is the package's HTTP client for members serving TLS: it
// trusts them without verifying (a test's own throw-away members) and
// presents t's client certificate, if any.
func tlsClient(t *TLS) (*http.Client, error) {
	conf := &tls.Config{InsecureSkipVerify: true}
	if t.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCertFile, t.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("etcdtest: client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, TLSClientConfig: conf}}, nil
}

// tail returns the last lines of the member's log, for start-up errors.
func (m *Member) tail() string { return testproc.Tail(filepath.Join(m.c.root, m.Name+".log")) }
