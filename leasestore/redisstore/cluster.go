package redisstore

import (
	"context"
	"net"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore/failover"
)

// clusterNodes is what leasectl adds to go-redis's cluster client: the slot
// map asked of the seed nodes the URL names through failover.Do, and the
// clients go-redis makes for the nodes, by address, so that a copy can
// reach a slot's new owner before go-redis's slot map names it (copies.go).
//
// go-redis would ask the seeds for the slot map one after the other in a
// random order, each until the caller's deadline: a silent seed would cost
// a third of the processes of a three-seed URL their first call. Through
// failover.Do the next seed is asked after the hedge bound, and a seed
// found silent is asked last, by the processes that start on this host
// meanwhile too.
type clusterNodes struct {
	seedOpt redis.Options // a seed's client's, but its address
	seeds   *failover.Endpoints

	mu       sync.Mutex
	seedCli  map[string]*redis.Client // by seed address
	byAddr   map[string]*redis.Client // the nodes' clients, by address
	loopback map[string]string        // ":port" (how go-redis names a loopback node) → the node's address
}

// seedScheme prefixes a seed's address in its name among the endpoints,
// and so in its note of silence, apart from other stores' on that address.
const seedScheme = "redis+cluster://"

// newClusterNodes returns the nodes of the cluster client opt configures,
// and sets opt's ClusterSlots and NewClient to theirs.
func newClusterNodes(opt *redis.ClusterOptions) *clusterNodes {
	names := make([]string, len(opt.Addrs))
	for i, a := range opt.Addrs {
		names[i] = seedScheme + a
	}
	n := &clusterNodes{seeds: failover.New(names, failover.DefaultNotes()),
		seedCli: map[string]*redis.Client{}, byAddr: map[string]*redis.Client{}, loopback: map[string]string{},
		seedOpt: redis.Options{Dialer: opt.Dialer, TLSConfig: opt.TLSConfig,
			Username: opt.Username, Password: opt.Password, Protocol: opt.Protocol, DisableIdentity: opt.DisableIdentity,
			MaxRetries: opt.MaxRetries, DialTimeout: opt.DialTimeout, DialerRetries: opt.DialerRetries,
			ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout, ContextTimeoutEnabled: opt.ContextTimeoutEnabled,
			PoolSize: 1, PipelinePoolSize: -1}}
	opt.ClusterSlots, opt.NewClient = n.slots, n.newClient
	return n
}

// slots asks the seeds for the slot map (failover.Do): the first answer
// counts, and a seed that fails is passed over for the next.
func (n *clusterNodes) slots(ctx context.Context) ([]redis.ClusterSlot, error) {
	return failover.Do(ctx, n.seeds, func(ctx context.Context, name string) ([]redis.ClusterSlot, error) {
		origin := strings.TrimPrefix(name, seedScheme)
		//lint:ignore SA1019 go-redis's own loader asks CLUSTER SLOTS too, which Redis 6 has and CLUSTER SHARDS not.
		slots, err := n.seed(origin).ClusterSlots(ctx).Result()
		if err != nil {
			return nil, err
		}
		n.relocate(slots, origin)
		return slots, nil
	}, func(error) bool { return true })
}

// relocate applies to the nodes of slots, as the seed origin named them,
// what go-redis does to a slot map it loads itself: a node on port 0 (a
// TLS-only cluster) is on origin's port, and a node on a loopback address,
// when origin's is not, on origin's host. go-redis names a loopback node
// that remains ":port" in a map it did not load (ClusterSlots): newClient
// gives its client the address back.
func (n *clusterNodes) relocate(slots []redis.ClusterSlot, origin string) {
	originHost, originPort, _ := net.SplitHostPort(origin)
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range slots {
		for j := range slots[i].Nodes {
			node := &slots[i].Nodes[j]
			host, port, err := net.SplitHostPort(node.Addr)
			if err != nil {
				continue
			}
			if port == "0" {
				port = originPort
			}
			if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
				if o := net.ParseIP(originHost); o == nil || !o.IsLoopback() {
					host = originHost
				} else {
					n.loopback[":"+port] = net.JoinHostPort(host, port)
				}
			}
			node.Addr = net.JoinHostPort(host, port)
		}
	}
}

// seed is the client of the seed at addr, made at its first use with the
// cluster's options as Open set them, one connection.
func (n *clusterNodes) seed(addr string) *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	c, ok := n.seedCli[addr]
	if !ok {
		opt := n.seedOpt
		opt.Addr = addr
		c = redis.NewClient(&opt)
		n.seedCli[addr] = c
	}
	return c
}

// newClient is the cluster client's NewClient: it makes the node's client
// as go-redis would, on the address the seed gave.
func (n *clusterNodes) newClient(opt *redis.Options) *redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	if addr, ok := n.loopback[opt.Addr]; ok {
		// A copy: go-redis may still read the options it passed.
		own := *opt
		own.Addr = addr
		opt = &own
	}
	return redis.NewClient(opt)
}

// added keeps the client go-redis made for a node, the latest for its
// address; the cluster client calls it (OnNewNode) once it has set the
// client up, so a copy never uses one it is still setting up.
func (n *clusterNodes) added(c *redis.Client) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.byAddr[c.Options().Addr] = c
}

// all returns every node's client. go-redis closes a node's client once the
// node left the cluster: a copy sent through it fails at once.
func (n *clusterNodes) all() []*redis.Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	list := make([]*redis.Client, 0, len(n.byAddr))
	for _, c := range n.byAddr {
		list = append(list, c)
	}
	return list
}

// close closes the seeds' clients; go-redis closes the nodes'.
func (n *clusterNodes) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.seedCli {
		_ = c.Close()
	}
}
