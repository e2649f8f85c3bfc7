package redistest

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func startCluster(t *testing.T, opts ClusterOptions) *Cluster {
	t.Helper()
	began := time.Now()
	c, err := StartCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster of %d masters and %d replicas ready in %s", len(c.Masters), len(c.Replicas), time.Since(began))
	t.Cleanup(func() { c.Stop() })
	return c
}

func TestClusterRedirectsToTheSlotOwner(t *testing.T) {
	c := startCluster(t, ClusterOptions{})
	if len(c.Masters) != 3 || len(c.Replicas) != 0 {
		t.Fatalf("%d masters and %d replicas, want 3 and 0 by default", len(c.Masters), len(c.Replicas))
	}
	for _, m := range c.Masters {
		if _, port, _ := net.SplitHostPort(m.Addr); port == "6379" {
			t.Fatalf("node on the shared port 6379")
		}
		info, err := m.Do("CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			t.Fatalf("%s: CLUSTER INFO = %q, want state ok and every slot assigned", m.Addr, info)
		}
	}

	// Exactly one master owns the key's slot; the others redirect to it.
	var owner string
	var moved []string
	for _, m := range c.Masters {
		got, err := m.Do("SET", "k", "v")
		var reply replyError
		switch {
		case err == nil && got == "OK":
			owner = m.Addr
		case errors.As(err, &reply) && strings.HasPrefix(string(reply), "MOVED "):
			moved = append(moved, string(reply))
		default:
			t.Fatalf("SET on %s = %q, %v; want OK or MOVED", m.Addr, got, err)
		}
	}
	if owner == "" || len(moved) != 2 {
		t.Fatalf("SET was accepted by %q and redirected %q; want one owner and two MOVED", owner, moved)
	}
	for _, r := range moved {
		if !strings.HasSuffix(r, " "+owner) {
			t.Fatalf("redirect %q does not point at the owner %s", r, owner)
		}
	}

	wantURL := "redis://" + c.Masters[0].Addr + "?addr=" + c.Masters[1].Addr + "&addr=" + c.Masters[2].Addr
	if got := c.URL(); got != wantURL {
		t.Fatalf("URL() = %q, want %q", got, wantURL)
	}
	addrs := c.Addrs()
	var dirs []string
	for i, m := range c.Masters {
		if addrs[i] != m.Addr {
			t.Fatalf("Addrs() = %q, want the masters' addresses in order", addrs)
		}
		dirs = append(dirs, m.dir)
	}

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			conn.Close()
			t.Fatalf("node %s still accepts connections after Stop", a)
		}
		if _, err := os.Stat(dirs[i]); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("folder %s of node %s left after Stop: %v", dirs[i], a, err)
		}
	}
}

func TestClusterWithReplicas(t *testing.T) {
	c := startCluster(t, ClusterOptions{Masters: 3, Replicas: 1, Args: []string{"--cluster-node-timeout", "6000"}})
	if len(c.Masters) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("%d masters and %d replicas, want 3 and 3", len(c.Masters), len(c.Replicas))
	}
	for _, n := range append(c.Masters, c.Replicas...) {
		if got, err := n.Do("CONFIG", "GET", "cluster-node-timeout"); err != nil || got != "cluster-node-timeout\n6000" {
			t.Fatalf("%s: CONFIG GET cluster-node-timeout = %q, %v; want the 6000 from Args", n.Addr, got, err)
		}
	}
	for _, m := range c.Masters {
		repl, err := m.Do("INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		if got := infoField(repl, "role"); got != "master" {
			t.Fatalf("%s in Masters has role %q", m.Addr, got)
		}
		if got := infoField(repl, "connected_slaves"); got != "1" {
			t.Fatalf("master %s has %s connected replicas, want 1", m.Addr, got)
		}
	}
	for _, r := range c.Replicas {
		repl, err := r.Do("INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		if got := infoField(repl, "role"); got != "slave" {
			t.Fatalf("%s in Replicas has role %q", r.Addr, got)
		}
		if got := infoField(repl, "master_link_status"); got != "up" {
			t.Fatalf("replica %s: master_link_status:%s, want up", r.Addr, got)
		}
	}
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("Addrs() has %d addresses, want the 3 masters'", got)
	}
}

func TestClusterOptionsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ClusterOptions
	}{
		{"fewer than 3 masters", ClusterOptions{Masters: 2}},
		{"negative replicas", ClusterOptions{Replicas: -1}},
		{"a password", ClusterOptions{Args: []string{"--requirepass", "pw"}}},
		{"an unknown redis-server option", ClusterOptions{Args: []string{"--no-such-option", "1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := StartCluster(tc.opts)
			if err == nil {
				c.Stop()
				t.Fatalf("StartCluster(%+v) gave no error", tc.opts)
			}
			t.Log(err)
		})
	}
}
