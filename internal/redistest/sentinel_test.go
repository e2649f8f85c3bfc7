package redistest

import (
	"bufio"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// failoverTimeout bounds each failover a test waits for. With the defaults
// one takes a few seconds; a split vote that Sentinel retries after twice
// its failover-timeout still fits.
const failoverTimeout = 30 * time.Second

func startSentinel(t *testing.T, opts SentinelOptions) *Sentinel {
	t.Helper()
	began := time.Now()
	s, err := StartSentinel(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("primary, %d replicas and %d Sentinels ready in %s", len(s.data)-1, len(s.sentinels), time.Since(began))
	t.Cleanup(func() { s.Stop() })
	return s
}

// killAndWaitFailover SIGKILLs the primary and returns the replica the
// Sentinels promote, once it is master and every other live replica
// follows it.
func killAndWaitFailover(t *testing.T, s *Sentinel) (old, promoted *Server) {
	t.Helper()
	old, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	promoted, err = s.WaitFailover(failoverTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failed over from %s to %s in %s", old.Addr, promoted.Addr, time.Since(began))
	if promoted == old {
		t.Fatalf("WaitFailover returned the killed primary %s", old.Addr)
	}
	if info, err := promoted.Do("INFO", "replication"); err != nil || infoField(info, "role") != "master" {
		t.Fatalf("promoted %s: INFO replication = %q, %v; want role:master", promoted.Addr, info, err)
	}
	for _, r := range s.data {
		if r == old || r == promoted {
			continue
		}
		if err := poll(time.Now().Add(failoverTimeout), func() error { return r.follows(promoted) }); err != nil {
			t.Fatalf("the other replica does not follow the new primary: %v", err)
		}
	}
	if p, err := s.Primary(); err != nil || p != promoted {
		t.Fatalf("Primary() after the failover = %v, %v; want %s", p, err, promoted.Addr)
	}
	return old, promoted
}

func TestSentinelFailsOverToAReplica(t *testing.T) {
	s := startSentinel(t, SentinelOptions{})
	primary, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := s.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	sentinels := s.Sentinels()
	if s.MasterName != "leasectl" || len(replicas) != 2 || len(sentinels) != 3 {
		t.Fatalf("master %q with %d replicas and %d Sentinels, want leasectl, 2 and 3 by default", s.MasterName, len(replicas), len(sentinels))
	}
	var dirs []string
	for _, n := range append(append([]*Server{primary}, replicas...), sentinels...) {
		if _, port, _ := net.SplitHostPort(n.Addr); port == "6379" || port == "26379" {
			t.Fatalf("server on the shared port %s", port)
		}
		dirs = append(dirs, n.dir)
	}
	for _, r := range replicas {
		if err := r.follows(primary); err != nil {
			t.Fatal(err)
		}
	}
	for _, sen := range sentinels {
		reply, err := sen.Do("SENTINEL", "MASTER", "leasectl")
		if err != nil {
			t.Fatal(err)
		}
		m := fieldLists(reply)[0]
		for field, want := range map[string]string{
			"quorum": "2", "down-after-milliseconds": "1000", "failover-timeout": "5000",
			"num-slaves": "2", "num-other-sentinels": "2",
		} {
			if m[field] != want {
				t.Errorf("Sentinel %s: %s = %q, want %q", sen.Addr, field, m[field], want)
			}
		}
	}
	wantURL := "redis://" + sentinels[0].Addr + "?master_name=leasectl&addr=" + sentinels[1].Addr + "&addr=" + sentinels[2].Addr
	if got := s.URL(); got != wantURL {
		t.Errorf("URL() = %q, want %q", got, wantURL)
	}

	// A write that every replica has acknowledged survives the failover.
	if got, err := primary.Do("SET", "k", "v"); err != nil || got != "OK" {
		t.Fatalf("SET = %q, %v", got, err)
	}
	if got, err := primary.Do("WAIT", "2", "5000"); err != nil || got != "2" {
		t.Fatalf("WAIT 2 = %q, %v; want both replicas to acknowledge", got, err)
	}
	old, promoted := killAndWaitFailover(t, s)
	if old != primary || !slices.Contains(replicas, promoted) {
		t.Fatalf("failed over from %s to %s, want from the primary to one of the replicas", old.Addr, promoted.Addr)
	}
	if got, err := promoted.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET on the new primary = %q, %v; want the acknowledged write", got, err)
	}
	after, err := s.Replicas()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(after, promoted) || !slices.Contains(after, old) || len(after) != 2 {
		t.Fatalf("Replicas() after the failover does not hold the old primary and the other replica, but not the new primary")
	}

	// Nothing has failed since: a second wait must not report the same
	// failover again.
	if p, err := s.WaitFailover(300 * time.Millisecond); err == nil {
		t.Fatalf("WaitFailover with no new failover returned %s", p.Addr)
	}

	addrs := append(append([]string{old.Addr}, replicas[0].Addr, replicas[1].Addr), sentinels[0].Addr, sentinels[1].Addr, sentinels[2].Addr)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Fatalf("%s still accepts connections after Stop", a)
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("folder %s left after Stop: %v", d, err)
		}
	}
}

// authDo sends cmd on a fresh connection to addr, after AUTH password if
// password is set, and returns the error of whichever failed first.
func authDo(t *testing.T, addr, password string, cmd ...string) error {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(ioTimeout))
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := roundTrip(r, conn, []string{"AUTH", password}); err != nil {
			return err
		}
	}
	_, err = roundTrip(r, conn, cmd)
	return err
}

// wantReplyError fails unless err is a Redis error reply starting with
// prefix.
func wantReplyError(t *testing.T, what string, err error, prefix string) {
	t.Helper()
	var reply replyError
	if !errors.As(err, &reply) || !strings.HasPrefix(string(reply), prefix) {
		t.Errorf("%s: %v, want a %s error", what, err, prefix)
	}
}

func TestSentinelPasswordsAreSeparate(t *testing.T) {
	// The Sentinel password needs escaping in a URL and quoting in a
	// config file.
	const dataPW, sentinelPW = "data-pw", `sentinel pw"@?&`
	s := startSentinel(t, SentinelOptions{MasterName: "pw.test", Replicas: 1, Password: dataPW, SentinelPassword: sentinelPW})
	primary, err := s.Primary()
	if err != nil {
		t.Fatal(err)
	}
	sentinel := s.Sentinels()[0]

	wantReplyError(t, "SET without a password", authDo(t, primary.Addr, "", "SET", "k", "v"), "NOAUTH")
	wantReplyError(t, "AUTH with the Sentinel password on the primary", authDo(t, primary.Addr, sentinelPW, "SET", "k", "v"), "WRONGPASS")
	if err := authDo(t, primary.Addr, dataPW, "SET", "k", "v"); err != nil {
		t.Errorf("SET with the data password: %v", err)
	}
	ask := []string{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", "pw.test"}
	wantReplyError(t, "SENTINEL without a password", authDo(t, sentinel.Addr, "", ask...), "NOAUTH")
	wantReplyError(t, "AUTH with the data password on a Sentinel", authDo(t, sentinel.Addr, dataPW, ask...), "WRONGPASS")
	if err := authDo(t, sentinel.Addr, sentinelPW, ask...); err != nil {
		t.Errorf("SENTINEL with the Sentinel password: %v", err)
	}

	sentinels := s.Sentinels()
	url := s.URL()
	wantURL := "redis://:sentinel%20pw%22%40%3F&@" + sentinels[0].Addr + "?master_name=pw.test&addr=" + sentinels[1].Addr + "&addr=" + sentinels[2].Addr + "&password=data-pw"
	if url != wantURL {
		t.Errorf("URL() = %q, want %q", url, wantURL)
	}
	o, err := redis.ParseFailoverURL(url)
	if err != nil {
		t.Fatalf("go-redis rejects URL() %q: %v", url, err)
	}
	if o.MasterName != "pw.test" || o.Password != dataPW || o.SentinelPassword != sentinelPW || o.SentinelUsername != "" ||
		!slices.Equal(o.SentinelAddrs, []string{sentinels[0].Addr, sentinels[1].Addr, sentinels[2].Addr}) {
		t.Errorf("go-redis reads URL() %q as master %q, password %q, Sentinel user %q and password %q, Sentinels %q",
			url, o.MasterName, o.Password, o.SentinelUsername, o.SentinelPassword, o.SentinelAddrs)
	}

	// The Sentinels can still vote with each other and reach the replica.
	killAndWaitFailover(t, s)
}

func TestSentinelOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts SentinelOptions
	}{
		{"negative replicas", SentinelOptions{Replicas: -1}},
		{"negative Sentinels", SentinelOptions{Sentinels: -1}},
		{"a master name with a space", SentinelOptions{MasterName: "my master"}},
		{"down-after under a millisecond", SentinelOptions{DownAfter: time.Microsecond}},
		{"a negative failover timeout", SentinelOptions{FailoverTimeout: -time.Second}},
		{"a data password with a space", SentinelOptions{Password: "a b"}},
		{"a password in Args", SentinelOptions{Args: []string{"--requirepass", "pw"}}},
		{"replication in Args", SentinelOptions{Args: []string{"--replicaof", "127.0.0.1", "1"}}},
		{"an unknown redis-server option", SentinelOptions{Args: []string{"--no-such-option", "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := StartSentinel(tc.opts)
			if err == nil {
				s.Stop()
				t.Fatalf("StartSentinel(%+v) gave no error", tc.opts)
			}
			t.Log(err)
		})
	}
}
