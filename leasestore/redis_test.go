package leasestore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
)

// testRedis is the package's shared redis-server, started by TestMain;
// testRedisErr says why it is missing.
var (
	testRedis    *redistest.Server
	testRedisErr error
)

func TestMain(m *testing.M) {
	testRedis, testRedisErr = redistest.Start(redistest.Options{})
	code := m.Run()
	if testRedis != nil {
		if err := testRedis.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	os.Exit(code)
}

// sharedRedis returns the package's redis-server, failing the test when it
// could not be started.
func sharedRedis(t testing.TB) *redistest.Server {
	t.Helper()
	if testRedisErr != nil {
		t.Fatalf("test redis-server: %v", testRedisErr)
	}
	return testRedis
}

// ownRedis starts a redis-server for one test, stopped when it ends.
func ownRedis(t testing.TB, args ...string) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start(redistest.Options{Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

var namespaces atomic.Int64

// freshNamespace is a namespace no other test uses.
func freshNamespace() string {
	return fmt.Sprintf("lt%d", namespaces.Add(1))
}

// openRedis opens a client closed when the test ends.
func openRedis(t testing.TB, rawURL, namespace string) *Redis {
	t.Helper()
	s, err := OpenRedis(t.Context(), rawURL, namespace)
	if err != nil {
		t.Fatalf("OpenRedis(%s): %v", Redact(rawURL), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestRedisConformance(t *testing.T) {
	srv := sharedRedis(t)
	testConformance(t, func(t *testing.T) storeHarness {
		ns := freshNamespace()
		return storeHarness{
			open: func(t *testing.T) Store {
				s, err := OpenRedis(t.Context(), srv.URL, ns)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			wipe: func(t *testing.T) {
				if _, err := srv.Do("FLUSHALL"); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}

// redisCall bounds a call the way the supervisor does; every store call must
// return by this deadline plus a generous margin.
func redisCall(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// wantUnavailable asserts that err is an *UnavailableError whose message
// names the cause and holds none of the secrets.
func wantUnavailable(t *testing.T, err error, cause string, secrets ...string) {
	t.Helper()
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v (%T), want an *UnavailableError", err, err)
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	if !strings.Contains(msg, cause) {
		t.Errorf("error %q does not say %q", msg, cause)
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error %q spans several lines", msg)
	}
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			t.Errorf("error %q reveals the secret %q", msg, s)
		}
	}
}

func TestRedisRestartDuringLease(t *testing.T) {
	srv := ownRedis(t)
	s := openRedis(t, srv.URL, "ns")
	l := acquire(t, s, request("job", "w1", longTTL))
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// The restarted Redis lost everything: the lease is gone, and the
	// pooled connection is dead; the client must notice both.
	if err := s.Renew(redisCall(t, hangGuard), l); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Renew after a restart: got %v, want ErrLeaseLost", err)
	}
	l2 := acquire(t, s, request("job", "w2", longTTL))
	if l2.Token <= l.Token {
		t.Fatalf("token after the restart %d is not above %d", l2.Token, l.Token)
	}
}

func TestRedisFrozenServerReturnsAtDeadline(t *testing.T) {
	srv := ownRedis(t)
	s := openRedis(t, srv.URL, "ns")
	l := acquire(t, s, request("job", "w1", longTTL))
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Thaw() })
	const deadline = 300 * time.Millisecond
	calls := map[string]func(ctx context.Context) error{
		"renew on a pooled connection": func(ctx context.Context) error { return s.Renew(ctx, l) },
		"acquire on a new client": func(ctx context.Context) error {
			_, err := openRedis(t, srv.URL, "ns").Acquire(ctx, request("other", "w2", longTTL))
			return err
		},
		"subscribe": func(ctx context.Context) error {
			sub, err := s.Subscribe(ctx, "job")
			if err == nil {
				sub.Close()
			}
			return err
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- call(redisCall(t, deadline)) }()
			select {
			case err := <-done:
				wantUnavailable(t, err, "before the deadline")
			case <-time.After(hangGuard):
				t.Fatalf("call still blocked %s after its %s deadline", hangGuard, deadline)
			}
		})
	}
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
			_, err := s.Acquire(redisCall(t, hangGuard), request("job", "w1", longTTL))
			wantUnavailable(t, err, "Redis refused the credentials", password, "wr0ng-Pa55")
		})
	}
	t.Run("right password", func(t *testing.T) {
		s := openRedis(t, "redis://:"+password+"@"+host, "ns")
		acquire(t, s, request("job", "w1", longTTL))
	})
}

func TestRedisOutOfMemory(t *testing.T) {
	srv := ownRedis(t, "--maxmemory-policy", "noeviction")
	s := openRedis(t, srv.URL, "ns")
	l := acquire(t, s, request("job", "w1", longTTL))
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", "1"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Acquire(redisCall(t, hangGuard), request("other", "w2", longTTL))
	wantUnavailable(t, err, "Redis is out of memory (maxmemory reached)")
	// Redis refuses every write when full, renewals included: the holder
	// must see the store failing, not its lease lost.
	err = s.Renew(redisCall(t, hangGuard), l)
	wantUnavailable(t, err, "Redis is out of memory (maxmemory reached)")
}

func TestRedisReadOnlyReplica(t *testing.T) {
	primary := sharedRedis(t)
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica := ownRedis(t, "--replicaof", host, port)
	s := openRedis(t, replica.URL, freshNamespace())
	_, err := s.Acquire(redisCall(t, hangGuard), request("job", "w1", longTTL))
	wantUnavailable(t, err, "connected to a read-only replica")
}

func TestRedisScriptingRefused(t *testing.T) {
	t.Run("commands renamed away", func(t *testing.T) {
		srv := ownRedis(t, "--rename-command", "EVALSHA", "", "--rename-command", "EVAL", "")
		s := openRedis(t, srv.URL, "ns")
		_, err := s.Acquire(redisCall(t, hangGuard), request("job", "w1", longTTL))
		wantUnavailable(t, err, "Redis refuses Lua scripts, which leasectl needs")
	})
	t.Run("ACL denies them", func(t *testing.T) {
		srv := sharedRedis(t)
		const user, password = "noscripts", "acl-Pa55"
		if _, err := srv.Do("ACL", "SETUSER", user, "on", ">"+password, "~*", "&*", "+@all", "-eval", "-evalsha"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Do("ACL", "DELUSER", user) })
		url := fmt.Sprintf("redis://%s:%s@%s/0", user, password, srv.Addr)
		s := openRedis(t, url, freshNamespace())
		_, err := s.Acquire(redisCall(t, hangGuard), request("job", "w1", longTTL))
		wantUnavailable(t, err, "Redis refuses Lua scripts, which leasectl needs", password)
	})
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
	_, err = s.Acquire(redisCall(t, hangGuard), request("job", "w1", longTTL))
	wantUnavailable(t, err, "cannot connect to Redis at "+srv.Addr, password)
}

func TestRedisInvalidURLHidesPassword(t *testing.T) {
	const password = "inv4lid-Pa55"
	for _, url := range []string{
		"redis://:" + password + "@127.0.0.1:notaport/0",
		"redis://:" + password + "@127.0.0.1:1/notadb",
		"redis://:" + password + "@127.0.0.1:1/0/1",
	} {
		_, err := OpenRedis(t.Context(), url, "ns")
		if err == nil {
			t.Errorf("OpenRedis accepted %s", Redact(url))
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("OpenRedis error %q reveals the password", err)
		}
	}
}

func TestRedisScriptCacheFlushed(t *testing.T) {
	srv := sharedRedis(t)
	s := openRedis(t, srv.URL, freshNamespace())
	l := acquire(t, s, request("job", "w1", longTTL))
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(redisCall(t, hangGuard), l); err != nil {
		t.Fatalf("Renew after SCRIPT FLUSH: %v", err)
	}
	release(t, s, l, ResultCompleted)
}

func TestRedisDatabaseFromURL(t *testing.T) {
	srv := ownRedis(t)
	s := openRedis(t, strings.TrimSuffix(srv.URL, "/0")+"/3", "ns")
	acquire(t, s, request("job", "w1", longTTL))
	info, err := srv.Do("INFO", "keyspace")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "db3:keys=") || strings.Contains(info, "db0:") {
		t.Fatalf("keys not in database 3 alone:\n%s", info)
	}
}

func TestRedisKeysShareTheJobHashTag(t *testing.T) {
	srv := sharedRedis(t)
	ns := freshNamespace()
	s := openRedis(t, srv.URL, ns)
	const job = "team/nightly:report@eu+1"
	// Go through every transition so that every kind of key exists.
	l := acquire(t, s, request(job, "w1", longTTL))
	if err := s.Renew(redisCall(t, hangGuard), l); err != nil {
		t.Fatal(err)
	}
	release(t, s, l, ResultCompleted)
	crashRun(t, s, job, "w2", 3)
	if _, err := s.Scan(redisCall(t, hangGuard)); err != nil {
		t.Fatal(err)
	}
	acquire(t, s, request(job, "w3", longTTL))
	if err := s.Quarantine(redisCall(t, hangGuard), job, Note{By: "op", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	keys, err := srv.Do("KEYS", ns+":*")
	if err != nil {
		t.Fatal(err)
	}
	storeWide := map[string]bool{ns + ":live": true, ns + ":quarantined": true}
	perJob := 0
	for _, k := range strings.Split(keys, "\n") {
		switch {
		case storeWide[k]:
			delete(storeWide, k)
		case strings.HasPrefix(k, ns+":{"+job+"}:"):
			perJob++
		default:
			t.Errorf("key %q carries neither the job's hash tag nor a store-wide name", k)
		}
	}
	if perJob != 3 || len(storeWide) != 0 {
		t.Errorf("keys %q: want evidence, record and history of the job plus the index and quarantine set", keys)
	}
}

func TestRedisTLSURL(t *testing.T) {
	srv := sharedRedis(t)
	s := openRedis(t, "rediss://"+srv.Addr+"/0", freshNamespace())
	if s.rdb.Options().TLSConfig == nil {
		t.Fatal("a rediss:// URL gave a client without TLS")
	}
	// The test server speaks plain TCP and waits for the rest of what it
	// takes for an inline command: the handshake must end at the deadline,
	// as an unavailable store.
	_, err := s.Acquire(redisCall(t, 300*time.Millisecond), request("job", "w1", longTTL))
	wantUnavailable(t, err, "no answer from Redis at "+srv.Addr+" before the deadline")
}
