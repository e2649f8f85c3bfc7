package redisstore

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
)

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis+cluster", "rediss+cluster"} {
		leasestore.Register(scheme, openURL)
	}
}

// openURL is the leasestore.Opener of the Redis schemes.
func openURL(_ context.Context, u *url.URL, namespace string) (leasestore.Driver, error) {
	return Open(u.String(), namespace)
}

// sentinelDialTimeout bounds a Sentinel client's dial unless the URL sets
// ?dial_timeout=. go-redis finds the primary as it dials, by asking every
// Sentinel at once and waiting for all of them while holding a lock that
// every other dial waits on: a silent Sentinel would hold a new process's
// first connection, and its copies' (copies.go), until the caller's
// deadline. Bounded, the first dial fails after this, and the copy sent
// after the hedge bound dials through the Sentinel that answered, as does a
// second dial attempt, which every Sentinel client makes (its connection
// was never made: nothing was sent, so trying again is harmless). 500 ms is
// failover's hedge bound on a long window: a connection and a Sentinel's
// answer (from memory) take a millisecond on a LAN; a SYN lost on the way,
// retransmitted after a second, fails that dial, and the next copy dials
// again.
const sentinelDialTimeout = 500 * time.Millisecond

// minReplicasParam is leasectl's own query parameter (go-redis refuses
// parameters it does not know, so it is taken out before go-redis parses
// the URL): how many replicas must acknowledge every grant and renewal.
const minReplicasParam = "min_replicas"

// Open returns a Store on the Redis deployment rawURL names, parsed by
// go-redis's own parsers, with their query options (dial_timeout=...):
//
//   - redis://[user:password@]host[:port][/db], rediss:// for TLS: one
//     server (redis.ParseURL);
//   - the same with ?master_name=NAME[&addr=host:port...]: a primary found
//     through Sentinel (redis.ParseFailoverURL); the URL's user and password
//     are the sentinels', ?password= (and ?username=) the data nodes';
//   - redis+cluster://host:port[?addr=host:port...], rediss+cluster:// for
//     TLS: a Redis Cluster reached through any of its nodes
//     (redis.ParseClusterURL). A plain redis:// URL never means a cluster.
//
// ?min_replicas=N, on any of them, makes every grant and renewal wait until
// N replicas acknowledged it (replicas.go).
//
// Open does not contact the server: the first call does, so start-up costs
// no extra round trip. A URL it cannot use is a *leasestore.URLError that
// never holds a password.
func Open(rawURL, namespace string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &leasestore.URLError{URL: rawURL, Reason: "not a URL"}
	}
	if u.Host == "" {
		return nil, &leasestore.URLError{URL: rawURL, Reason: "no host"}
	}
	urlErr := func(err error) error {
		return &leasestore.URLError{URL: rawURL, Reason: leasestore.Scrub(strings.TrimPrefix(err.Error(), "redis: "), leasestore.URLSecrets(u)...)}
	}
	q := u.Query()
	minReplicas := 0
	if v := q.Get(minReplicasParam); q.Has(minReplicasParam) {
		if minReplicas, err = strconv.Atoi(v); err != nil || minReplicas < 0 {
			return nil, &leasestore.URLError{URL: rawURL, Reason: "min_replicas must be a whole number of replicas, 0 or more"}
		}
		q.Del(minReplicasParam)
		u.RawQuery = q.Encode()
	}
	if !q.Has("master_name") && (q.Has("password") || q.Has("username")) {
		// go-redis reads them only for Sentinel's data nodes, and refuses
		// them here as unknown options without saying where they go.
		return nil, &leasestore.URLError{URL: rawURL, Reason: "?password= and ?username= are for Sentinel URLs (with ?master_name=); " +
			"put them in the URL itself: redis://:PASSWORD@host:port/db or redis://USER:PASSWORD@host:port/db (" + leasestore.PercentHint + ")"}
	}
	// A pool of poolSize connections unless the URL asks for another
	// (go-redis's ?pool_size=): a supervisor needs few, a registry in front
	// of the store (leasectl serve) serving many workers needs more.
	keepPool := q.Has("pool_size")
	// Never retry a command: a retried acquire or release could act twice
	// (a cluster client still follows MOVED and ASK redirects, which are
	// not retries). The caller's ctx bounds socket I/O, so a frozen Redis
	// returns at the caller's deadline; a grant or a renewal is copied to a
	// connection of its own meanwhile (copies.go). RESP2 without client
	// identity spares the extra handshake round trips of RESP3
	// (maintenance notifications, CLIENT SETINFO); one dial attempt, since
	// callers retry on their own terms (two through Sentinel:
	// sentinelDialTimeout); a TLS handshake bounded on its own (tls.go).
	// Pipelines (the store-wide views) share the one pool: a process makes
	// one call at a time, and go-redis's separate pipeline pool would dial
	// a second connection, and wait out a second dial when the server does
	// not answer.
	var rdb redis.UniversalClient
	var addr string
	var nodes *clusterNodes
	db, useTLS := 0, false
	switch {
	case strings.HasSuffix(u.Scheme, "+cluster"):
		u.Scheme = strings.TrimSuffix(u.Scheme, "+cluster")
		opt, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return nil, urlErr(err)
		}
		opt.MaxRetries, opt.ContextTimeoutEnabled, opt.Protocol, opt.DisableIdentity = -1, true, 2, true
		opt.DialerRetries = 1
		if !keepPool {
			opt.PoolSize = poolSize
		}
		if opt.TLSConfig != nil {
			opt.Dialer, useTLS = tlsDialer(opt.TLSConfig, opt.DialTimeout), true
		}
		// Every script names its keys, all of one slot, so the slot routes
		// it. go-redis's routing policies would first fetch COMMAND's whole
		// table (a large reply, once per process, and again on every
		// command when the ACL refuses COMMAND, as the least-privilege
		// user does) to learn nothing leasectl uses.
		opt.DisableRoutingPolicies = true
		nodes = newClusterNodes(opt)
		cc := redis.NewClusterClient(opt)
		cc.OnNewNode(nodes.added)
		rdb, addr = cc, "cluster "+strings.Join(opt.Addrs, ",")
	case q.Has("master_name"):
		opt, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return nil, urlErr(err)
		}
		opt.MaxRetries, opt.ContextTimeoutEnabled, opt.Protocol, opt.DisableIdentity = -1, true, 2, true
		opt.DialerRetries, opt.PipelinePoolSize = 1, -1
		if !keepPool {
			opt.PoolSize = poolSize
		}
		if !q.Has("dial_timeout") {
			opt.DialTimeout = sentinelDialTimeout
		}
		// A second dial goes through the Sentinel that answered the first.
		opt.DialerRetries = 2
		if opt.TLSConfig != nil {
			opt.Dialer, useTLS = tlsDialer(opt.TLSConfig, opt.DialTimeout), true
		}
		db = opt.DB
		rdb, addr = redis.NewFailoverClient(opt), "primary "+opt.MasterName+" (sentinels "+strings.Join(opt.SentinelAddrs, ",")+")"
	default:
		opt, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, urlErr(err)
		}
		opt.MaxRetries, opt.ContextTimeoutEnabled, opt.Protocol, opt.DisableIdentity = -1, true, 2, true
		opt.DialerRetries, opt.PipelinePoolSize = 1, -1
		if !keepPool {
			opt.PoolSize = poolSize
		}
		if opt.TLSConfig != nil {
			opt.Dialer, useTLS = tlsDialer(opt.TLSConfig, opt.DialTimeout), true
		}
		db = opt.DB
		rdb, addr = redis.NewClient(opt), opt.Addr
	}
	s := New(rdb, namespace)
	s.nodes = nodes
	s.addr, s.url, s.db, s.tls, s.secrets, s.minReplicas = addr, leasestore.Redact(rawURL), db, useTLS, leasestore.URLSecrets(u), minReplicas
	return s, nil
}
