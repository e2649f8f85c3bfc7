package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/testproc"
)

// clusterTimeout bounds how long StartCluster waits, after the nodes answer,
// for redis-cli to form the cluster and for every node to report it healthy.
// On an idle machine this takes a few seconds (redis-cli itself sleeps a
// second while the nodes meet); the margin is for a loaded 2-core machine,
// and only a hang should ever reach it.
const clusterTimeout = 60 * time.Second

// clusterSlots is the number of hash slots of every Redis Cluster.
const clusterSlots = 16384

// clusterNodeTimeout is the nodes' --cluster-node-timeout (Redis's default
// is 15 s). A node pings every peer at least every half of it, and news of
// a node spreads only on pings, so with 15 s a node can take over 10 s to
// learn of a replica after redis-cli is done; a failure is detected only
// after it too. Lower is faster but trades the other way: a node starved of
// CPU for this long on a loaded machine is marked failing, and its replica
// may take over mid-test. Tests that want failover faster can lower it in
// ClusterOptions.Args.
const clusterNodeTimeout = "5000" // milliseconds

// ClusterOptions configure a test cluster.
type ClusterOptions struct {
	// Masters is the number of masters; 0 means 3, the fewest redis-cli
	// accepts.
	Masters int
	// Replicas is the number of replicas of each master; 0 means none.
	Replicas int
	// Args are extra redis-server arguments for every node, after (and so
	// overriding) those StartCluster adds, e.g. "--cluster-node-timeout",
	// "2000" for a faster failover than the 5 s default. --requirepass is
	// not supported.
	Args []string
}

// Cluster is a running Redis Cluster started by StartCluster: masters that
// share the 16384 slots and their replicas, each node a Server of its own.
type Cluster struct {
	// Masters are the nodes that were masters when the cluster formed, in
	// the order their addresses were given to redis-cli.
	Masters []*Server
	// Replicas are the nodes that were replicas when the cluster formed.
	Replicas []*Server
}

// StartCluster starts the nodes of a cluster, each a cluster-mode
// redis-server on free loopback ports in its own folder, forms the cluster
// with redis-cli --cluster create, and returns once every node reports
// cluster_state:ok with all slots assigned and every replica is in sync with
// its master. The caller must Stop it.
func StartCluster(opts ClusterOptions) (*Cluster, error) {
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.Masters < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 masters, not %d", opts.Masters)
	}
	if opts.Replicas < 0 {
		return nil, fmt.Errorf("redistest: replicas per master must not be negative, not %d", opts.Replicas)
	}
	if requirePass(opts.Args) != "" {
		return nil, errors.New("redistest: --requirepass is not supported for clusters")
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, errors.New("redis-cli not found (Debian package redis-tools): run make deps")
	}
	nodeOpts := Options{Args: append([]string{
		"--cluster-node-timeout", clusterNodeTimeout,
		// A replica's first sync waits this long (5 s by default) for
		// other replicas to join the same transfer; nothing here gains
		// from waiting.
		"--repl-diskless-sync-delay", "0",
	}, opts.Args...)}

	var nodes []*Server
	for range opts.Masters * (1 + opts.Replicas) {
		s, err := startServer(nodeOpts, clusterNode, "")
		if err != nil {
			stopAll(nodes)
			return nil, err
		}
		nodes = append(nodes, s)
	}
	c, err := formCluster(nodes, opts)
	if err != nil {
		stopAll(nodes)
		return nil, err
	}
	return c, nil
}

// formCluster runs redis-cli --cluster create over nodes, waits until the
// cluster is ready, and sorts the nodes by the role redis-cli gave them.
func formCluster(nodes []*Server, opts ClusterOptions) (*Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	for _, s := range nodes {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	cmd := exec.CommandContext(ctx, "redis-cli", args...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create still running after %s: %s", clusterTimeout, testproc.LastLines(string(out)))
	}
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w: %s", err, testproc.LastLines(string(out)))
	}

	var c Cluster
	for {
		c.Masters, c.Replicas = nil, nil
		var notReady error
		for _, s := range nodes {
			role, err := s.clusterRole(len(nodes))
			if err != nil {
				notReady = err
				break
			}
			if role == "master" {
				c.Masters = append(c.Masters, s)
			} else {
				c.Replicas = append(c.Replicas, s)
			}
		}
		if notReady == nil {
			if len(c.Masters) == opts.Masters {
				return &c, nil
			}
			// Roles are settled once the nodes are ready, so a different
			// split will not mend itself.
			return nil, fmt.Errorf("redistest: cluster formed with %d masters and %d replicas, want %d and %d",
				len(c.Masters), len(c.Replicas), opts.Masters, opts.Masters*opts.Replicas)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redistest: cluster not ready after %s: %w", clusterTimeout, notReady)
		case <-time.After(pollInterval):
		}
	}
}

// clusterRole returns "master" or "replica" once the node reports the
// cluster healthy (cluster_state:ok, every slot assigned and served, all
// nodes known) and, for a replica, its link to its master up with the first
// sync done; until then it returns an error that says what is missing.
func (s *Server) clusterRole(nodes int) (string, error) {
	info, err := s.Do("CLUSTER", "INFO")
	if err != nil {
		return "", err
	}
	if state := infoField(info, "cluster_state"); state != "ok" {
		return "", fmt.Errorf("%s: cluster_state:%s", s.Addr, state)
	}
	for _, field := range []string{"cluster_slots_assigned", "cluster_slots_ok"} {
		if n := infoField(info, field); n != strconv.Itoa(clusterSlots) {
			return "", fmt.Errorf("%s: %s:%s, want %d", s.Addr, field, n, clusterSlots)
		}
	}
	if n := infoField(info, "cluster_known_nodes"); n != strconv.Itoa(nodes) {
		return "", fmt.Errorf("%s: cluster_known_nodes:%s, want %d", s.Addr, n, nodes)
	}
	repl, err := s.Do("INFO", "replication")
	if err != nil {
		return "", err
	}
	switch role := infoField(repl, "role"); role {
	case "master":
		return "master", nil
	case "slave":
		if link := infoField(repl, "master_link_status"); link != "up" {
			return "", fmt.Errorf("%s: replica's master_link_status:%s", s.Addr, link)
		}
		return "replica", nil
	default:
		return "", fmt.Errorf("%s: unknown role %q", s.Addr, role)
	}
}

// Addrs returns the masters' addresses, host:port.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		addrs[i] = s.Addr
	}
	return addrs
}

// URL returns a seed URL for the cluster in the form go-redis's
// ParseClusterURL reads: the first master as the host, the other masters as
// addr parameters, e.g. redis://127.0.0.1:p1?addr=127.0.0.1:p2&addr=127.0.0.1:p3.
func (c *Cluster) URL() string {
	addrs := c.Addrs()
	var b strings.Builder
	b.WriteString("redis://" + addrs[0])
	for i, a := range addrs[1:] {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("addr=" + a)
	}
	return b.String()
}

// Stop stops every node as Server.Stop does and removes their folders. It
// stops the replicas first, so that no master waits for a replica to catch
// up before it exits.
func (c *Cluster) Stop() error {
	return errors.Join(stopAll(c.Replicas), stopAll(c.Masters))
}

// stopAll stops every server, even after one of them fails to stop.
func stopAll(servers []*Server) error {
	var errs []error
	for _, s := range servers {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}

// infoField returns the value of field in the text of an INFO reply, or ""
// if the reply has no such field.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Reshard moves slots hash slots, with their keys, from the master from to
// the master to, as an operator would with redis-cli --cluster reshard:
// while it runs, clients meet ASK and MOVED redirects.
func Reshard(from, to *Server, slots int) error {
	fromID, err := from.Do("CLUSTER", "MYID")
	if err != nil {
		return err
	}
	toID, err := to.Do("CLUSTER", "MYID")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", from.Addr,
		"--cluster-from", fromID, "--cluster-to", toID, "--cluster-slots", strconv.Itoa(slots), "--cluster-yes").CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: redis-cli --cluster reshard: %w: %s", err, testproc.LastLines(string(out)))
	}
	return nil
}
