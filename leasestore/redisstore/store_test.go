package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// testRedis is the package's shared redis-server.
var testRedis = testserver.Share("test redis-server", redistest.Start, redistest.Options{})

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run runs the tests with a state folder of their own: the notes of silent
// cluster seeds (cluster.go) stay out of the user's.
func run(m *testing.M) int {
	state, err := os.MkdirTemp("", "redisstore-state-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(state)
	os.Setenv("XDG_STATE_HOME", state)
	return testserver.Run(m, testRedis)
}

// ownRedis starts a redis-server for one test, stopped when it ends.
func ownRedis(t testing.TB, args ...string) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start(redistest.Options{Args: args})
	return testserver.Own(t, srv, err)
}

var namespaces atomic.Int64

// freshNamespace is a namespace no other test uses.
func freshNamespace() string {
	return fmt.Sprintf("lt%d", namespaces.Add(1))
}

// openRedis opens a client closed when the test ends.
func openRedis(t testing.TB, rawURL, namespace string) *Store {
	t.Helper()
	return storetest.Open(t, Open, rawURL, namespace)
}

// harness makes each test's store in a namespace of its own on srv; a wipe
// flushes the whole server, as a restart without persistence would.
type harness struct{ srv *redistest.Server }

func (h harness) NewStore(testing.TB) storetest.Fixture {
	ns := freshNamespace()
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return openRedis(t, h.srv.URL, ns) },
		Wipe: func(t testing.TB) {
			if _, err := h.srv.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func (harness) Abilities() storetest.Abilities {
	return storetest.Abilities{CommonHistoryWords: true, WakesInTurn: true}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness{testRedis.Get(t)}) }

// redisCall bounds a call the way the supervisor does; every store call must
// return by this deadline plus a generous margin.
func redisCall(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

func TestRedisRestartDuringLease(t *testing.T) {
	srv := ownRedis(t)
	s := openRedis(t, srv.URL, "ns")
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The restarted Redis lost everything: the lease is gone, and the
	// pooled connection is dead; the client must notice both.
	if err := s.Renew(redisCall(t, storetest.HangGuard), l); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("Renew after a restart: got %v, want ErrLeaseLost", err)
	}
	l2 := storetest.Acquire(t, s, storetest.Request("job", "w2", storetest.LongTTL))
	if l2.Token <= l.Token {
		t.Fatalf("token after the restart %d is not above %d", l2.Token, l.Token)
	}
}

func TestRedisFrozenServerReturnsAtDeadline(t *testing.T) {
	srv := ownRedis(t)
	s := openRedis(t, srv.URL, "ns")
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Thaw() })
	storetest.WantFrozenCallsReturn(t, s, l, func(t testing.TB) leasestore.Driver { return openRedis(t, srv.URL, "ns") },
		"before the deadline")
}

func TestRedisWrongPassword(t *testing.T) {
	const password = "s3cret-Pa55"
	srv := ownRedis(t, "--requirepass", password)
	host := strings.TrimPrefix(srv.URL, "redis://")
	for name, url := range map[string]string{
		"wrong password":       "redis://:wr0ng-Pa55@" + host,
		"wrong user":           "redis://nobody:" + password + "@" + host,
		"no password":          srv.URL,
		"password as username": "redis://" + password + "@" + host,
	} {
		t.Run(name, func(t *testing.T) {
			s := openRedis(t, url, "ns")
			_, err := s.Acquire(redisCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
			storetest.WantUnavailable(t, err, "Redis refused the credentials", password, "wr0ng-Pa55")
		})
	}
	t.Run("right password", func(t *testing.T) {
		s := openRedis(t, "redis://:"+password+"@"+host, "ns")
		storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	})
}

func TestRedisOutOfMemory(t *testing.T) {
	srv := ownRedis(t, "--maxmemory-policy", "noeviction")
	s := openRedis(t, srv.URL, "ns")
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(redisCall(t, storetest.HangGuard), storetest.Request("other", "w2", storetest.LongTTL))
	storetest.WantUnavailable(t, err, "Redis is out of memory (maxmemory reached)")
	// Redis refuses every write when full, renewals included: the holder
	// must see the store failing, not its lease lost.
	err = s.Renew(redisCall(t, storetest.HangGuard), l)
	storetest.WantUnavailable(t, err, "Redis is out of memory (maxmemory reached)")
}

func TestRedisReadOnlyReplica(t *testing.T) {
	primary := testRedis.Get(t)
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica := ownRedis(t, "--replicaof", host, port)
	s := openRedis(t, replica.URL, freshNamespace())
	_, err := s.Acquire(redisCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
	storetest.WantUnavailable(t, err, "connected to a read-only replica")
}

func TestRedisScriptingRefused(t *testing.T) {
	t.Run("commands renamed away", func(t *testing.T) {
		srv := ownRedis(t, "--rename-command", "EVALSHA", "", "--rename-command", "EVAL", "")
		s := openRedis(t, srv.URL, "ns")
		_, err := s.Acquire(redisCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "Redis refuses Lua scripts, which leasectl needs")
	})
}

// TestRedisACLDenialNamesWhatToGrant gives a user all but one permission
// leasectl needs, for each kind of permission: the error names what to
// grant, whether Redis refused a command leasectl sent or one a script ran.
func TestRedisACLDenialNamesWhatToGrant(t *testing.T) {
	srv := testRedis.Get(t)
	const password = "acl-Pa55"
	for _, tc := range []struct {
		name string
		acl  []string // after on >password
		op   func(ctx context.Context, s *Store) error
		want string
	}{
		{"a command leasectl sends", []string{"~*", "&*", "+@all", "-evalsha"}, acquire, "Redis ACL denies the EVALSHA command: grant the user +evalsha"},
		{"a command a script runs", []string{"~*", "&*", "+@all", "-time"}, acquire, "Redis ACL denies the TIME command, which leasectl's Lua scripts run: grant the user +time"},
		{"a command a per-shard script runs", []string{"~*", "&*", "+@all", "-zrangebyscore"}, scan, "Redis ACL denies the ZRANGEBYSCORE command, which leasectl's Lua scripts run: grant the user +zrangebyscore"},
		{"the keys", []string{"~other:*", "&*", "+@all"}, acquire, "Redis ACL denies leasectl's keys: grant the user ~NS:*"},
		{"the channel a waiter subscribes to", []string{"~*", "&other:*", "+@all"}, subscribe, "Redis ACL denies leasectl's notification channels: grant the user &NS:*"},
		{"the channel a script publishes on", []string{"~*", "&other:*", "+@all"}, release, "Redis ACL denies leasectl's notification channels: grant the user &NS:*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user := fmt.Sprintf("acl%d", namespaces.Add(1))
			if _, err := srv.Do(append([]string{"ACL", "SETUSER", user, "on", ">" + password}, tc.acl...)...); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { srv.Do("ACL", "DELUSER", user) })
			ns := freshNamespace()
			s := openRedis(t, fmt.Sprintf("redis://%s:%s@%s/0", user, password, srv.Addr), ns)
			err := tc.op(redisCall(t, storetest.HangGuard), s)
			storetest.WantUnavailable(t, err, strings.ReplaceAll(tc.want, "NS", ns), password)
		})
	}
}

func acquire(ctx context.Context, s *Store) error {
	_, err := s.Acquire(ctx, storetest.Request("job", "w1", storetest.LongTTL))
	return err
}

func scan(ctx context.Context, s *Store) error {
	_, err := s.Scan(ctx)
	return err
}

func subscribe(ctx context.Context, s *Store) error {
	sub, err := s.Subscribe(ctx, "job", "")
	if err == nil {
		sub.Close()
	}
	return err
}

// release acquires the job and releases it: the release script publishes
// to the job's waiters.
func release(ctx context.Context, s *Store) error {
	l, err := s.Acquire(ctx, storetest.Request("job", "w1", storetest.LongTTL))
	if err != nil {
		return err
	}
	return s.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultCompleted})
}

func TestRedisUnreachable(t *testing.T) {
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	const password = "unre4chable-Pa55"
	s := openRedis(t, "redis://:"+password+"@"+srv.Addr+"/0", "ns")
	_, err = s.Acquire(redisCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
	storetest.WantUnavailable(t, err, "cannot connect to Redis at "+srv.Addr, password)
}

func TestRedisInvalidURLHidesPassword(t *testing.T) {
	const password = "inv4lid-Pa55"
	for _, url := range []string{
		"redis://:" + password + "@127.0.0.1:notaport/0",
		"redis://:" + password + "@127.0.0.1:1/notadb",
		"redis://:" + password + "@127.0.0.1:1/0/1",
	} {
		_, err := Open(url, "ns")
		if err == nil {
			t.Errorf("OpenRedis accepted %s", leasestore.Redact(url))
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("Open error %q reveals the password", err)
		}
	}
}

func TestRedisScriptCacheFlushed(t *testing.T) {
	srv := testRedis.Get(t)
	s := openRedis(t, srv.URL, freshNamespace())
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(redisCall(t, storetest.HangGuard), l); err != nil {
		t.Fatalf("Renew after SCRIPT FLUSH: %v", err)
	}
	storetest.Release(t, s, l, leasestore.ResultCompleted)
}

func TestRedisDatabaseFromURL(t *testing.T) {
	srv := ownRedis(t)
	s := openRedis(t, strings.TrimSuffix(srv.URL, "/0")+"/3", "ns")
	storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	info, err := srv.Do("INFO", "keyspace")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "db3:keys=") || strings.Contains(info, "db0:") {
		t.Fatalf("keys not in database 3 alone:\n%s", info)
	}
}

// TestRedisKeysShareTheShardHashTag goes through every transition and
// checks that every key a job's scripts touch carries its shard's hash tag,
// so that each script stays in one Redis Cluster slot.
func TestRedisKeysShareTheShardHashTag(t *testing.T) {
	srv := testRedis.Get(t)
	ns := freshNamespace()
	s := openRedis(t, srv.URL, ns)
	const job = "team/nightly:report@eu+1"
	l := storetest.Acquire(t, s, storetest.Request(job, "w1", storetest.LongTTL))
	if err := s.Renew(redisCall(t, storetest.HangGuard), l); err != nil {
		t.Fatal(err)
	}
	storetest.Release(t, s, l, leasestore.ResultCompleted)
	storetest.CrashRun(t, s, job, "w2", 3)
	if _, err := s.Scan(redisCall(t, storetest.HangGuard)); err != nil {
		t.Fatal(err)
	}
	storetest.Acquire(t, s, storetest.Request(job, "w3", storetest.LongTTL))
	if err := s.Quarantine(redisCall(t, storetest.HangGuard), job, leasestore.Note{By: "op", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	keys, err := srv.Do("KEYS", ns+":*")
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%s:{%d}:", ns, shardOf(job))
	want := map[string]bool{
		tag + job + ":e": true, tag + job + ":r": true, tag + job + ":h": true,
		tag + "live": true, tag + "quarantined": true, tag + "jobs": true,
	}
	for _, k := range strings.Split(keys, "\n") {
		if !want[k] {
			t.Errorf("unexpected key %q: every key of the job's scripts starts with %q", k, tag)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("key %q missing: want evidence, record and history of the job plus its shard's index, quarantine set and known jobs", k)
	}
}

// TestRedisShardsSpreadJobs checks that job IDs of one family spread over
// every shard, so heartbeats and slots do.
func TestRedisShardsSpreadJobs(t *testing.T) {
	const jobs = 64 * 100
	count := make([]int, shards)
	for i := range jobs {
		count[shardOf(fmt.Sprintf("encode-%06d", i))]++
	}
	for shard, n := range count {
		if n < jobs/shards/2 || n > jobs/shards*2 {
			t.Errorf("shard %d has %d of %d jobs, want about %d", shard, n, jobs, jobs/shards)
		}
	}
}

// TestRedisStatusIgnoresTheOldLayout checks that keys of the layout before
// sharding (one store-wide index, keys tagged by job) are ignored, not
// misread: status of such a job is IDLE.
func TestRedisStatusIgnoresTheOldLayout(t *testing.T) {
	srv := testRedis.Get(t)
	ns := freshNamespace()
	for _, cmd := range [][]string{
		{"SET", ns + ":{old}:e", "w\x00garbage"},
		{"HSET", ns + ":{old}:r", "t", "not-a-number"},
		{"RPUSH", ns + ":{old}:h", "corrupt"},
		{"ZADD", ns + ":live", "99999999999999999", "old"},
		{"SADD", ns + ":quarantined", "old"},
	} {
		if _, err := srv.Do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	s := openRedis(t, srv.URL, ns)
	if st := storetest.Status(t, s, "old"); st.State != leasestore.StateIdle {
		t.Errorf("status of a job with old-layout keys = %s, want %s", st.State, leasestore.StateIdle)
	}
	if leases, err := s.Leases(redisCall(t, storetest.HangGuard)); err != nil || len(leases) != 0 {
		t.Errorf("Leases = %v, %v; want none", leases, err)
	}
	storetest.Acquire(t, s, storetest.Request("old", "w1", storetest.LongTTL))
}

func TestRedisTLSURL(t *testing.T) {
	srv := testRedis.Get(t)
	s := openRedis(t, "rediss://"+srv.Addr+"/0", freshNamespace())
	if s.rdb.(*redis.Client).Options().TLSConfig == nil {
		t.Fatal("a rediss:// URL gave a client without TLS")
	}
	// The test server speaks plain TCP and waits for the rest of what it
	// takes for an inline command: the handshake must end at the deadline,
	// as an unavailable store.
	_, err := s.Acquire(redisCall(t, 300*time.Millisecond), storetest.Request("job", "w1", storetest.LongTTL))
	storetest.WantUnavailable(t, err, "no answer from Redis at "+srv.Addr+" before the deadline")
}

func TestOpenURLKinds(t *testing.T) {
	tests := []struct {
		raw, wantErr string
		client       string
		minReplicas  int
	}{
		{raw: "redis://127.0.0.1:6380/2", client: "*redis.Client"},
		{raw: "redis://127.0.0.1:6380/2?min_replicas=2", client: "*redis.Client", minReplicas: 2},
		{raw: "redis://s:s3cret@127.0.0.1:26379?master_name=m&addr=127.0.0.1:26380&password=s3cret2", client: "*redis.Client"},
		{raw: "redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&min_replicas=1", client: "*redis.ClusterClient", minReplicas: 1},
		{raw: "rediss+cluster://u:s3cret@127.0.0.1:7000", client: "*redis.ClusterClient"},
		{raw: "redis://127.0.0.1:7000?addr=127.0.0.1:7001", wantErr: "addr"},
		{raw: "redis://u:s3cret@127.0.0.1:1?min_replicas=-1", wantErr: "min_replicas must be"},
		{raw: "redis://u:s3cret@127.0.0.1:1?min_replicas=x", wantErr: "min_replicas must be"},
		{raw: "redis+cluster://u:s3cret@127.0.0.1:1?dial_timeout=abc", wantErr: "dial_timeout"},
		{raw: "redis://:s3cret@127.0.0.1:1?master_name=m&dial_timeout=abc", wantErr: "dial_timeout"},
	}
	for _, tt := range tests {
		s, err := Open(tt.raw, "ns")
		if tt.wantErr != "" {
			var urlErr *leasestore.URLError
			if !errors.As(err, &urlErr) || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("Open(%s) = %v, want a *URLError naming %q without the password", leasestore.Redact(tt.raw), err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%s): %v", leasestore.Redact(tt.raw), err)
			continue
		}
		if got := fmt.Sprintf("%T", s.rdb); got != tt.client || s.minReplicas != tt.minReplicas {
			t.Errorf("Open(%s) = %s with min_replicas %d, want %s with %d", leasestore.Redact(tt.raw), got, s.minReplicas, tt.client, tt.minReplicas)
		}
		s.Close()
	}
}

// A supervisor's client keeps a small pool; a URL may ask for a larger one
// (go-redis's ?pool_size=), as a registry in front of the store does.
func TestPoolSizeFromURL(t *testing.T) {
	for rawURL, want := range map[string]int{
		"redis://127.0.0.1:1/0":               poolSize,
		"redis://127.0.0.1:1/0?pool_size=32":  32,
		"redis://127.0.0.1:1/0?pool_size=256": 256,
	} {
		s := openRedis(t, rawURL, "ns")
		c, ok := s.rdb.(*redis.Client)
		if !ok {
			t.Fatalf("%s: a %T, want a single-node client", rawURL, s.rdb)
		}
		if got := c.Options().PoolSize; got != want {
			t.Errorf("%s: pool of %d, want %d", rawURL, got, want)
		}
	}
}

// Open sets up every kind of client alike: no retries, calls bounded by
// their context, RESP2 without client identity, one dial attempt (two
// through Sentinel, whose first may have waited on a silent Sentinel,
// sentinelDialTimeout) and the supervisor's pool.
func TestEveryKindOfClientIsSetUpAlike(t *testing.T) {
	for _, tt := range []struct {
		rawURL string
		dials  int
	}{{"redis://127.0.0.1:1/0", 1}, {"redis://127.0.0.1:1/0?master_name=m", 2}, {"redis+cluster://127.0.0.1:1", 1}} {
		rawURL, want := tt.rawURL, fmt.Sprint(true, true, 2, true, tt.dials, poolSize)
		var got string
		switch c := openRedis(t, rawURL, "ns").rdb.(type) {
		case *redis.Client:
			o := c.Options()
			got = fmt.Sprint(o.MaxRetries <= 0, o.ContextTimeoutEnabled, o.Protocol, o.DisableIdentity, o.DialerRetries, o.PoolSize)
		case *redis.ClusterClient:
			o := c.Options()
			got = fmt.Sprint(o.MaxRetries <= 0, o.ContextTimeoutEnabled, o.Protocol, o.DisableIdentity, o.DialerRetries, o.PoolSize)
		default:
			t.Fatalf("%s: a %T", rawURL, c)
		}
		if got != want {
			t.Errorf("%s: no retries, context timeouts, protocol, no identity, dial retries, pool = %s, want %s", rawURL, got, want)
		}
	}
}
