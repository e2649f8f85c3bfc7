package etcdtest

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	began := time.Now()
	c, err := StartCluster(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d member(s) ready in %s", len(c.Members), time.Since(began))
	t.Cleanup(func() { c.Stop() })
	return c
}

func put(t *testing.T, m *Member, key, value string) {
	t.Helper()
	if err := m.Do(t.Context(), "/v3/kv/put", map[string]any{"key": []byte(key), "value": []byte(value)}, nil); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, m *Member, key string) string {
	t.Helper()
	var out struct {
		KVs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := m.Do(t.Context(), "/v3/kv/range", map[string]any{"key": []byte(key)}, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.KVs) == 0 {
		return ""
	}
	return string(out.KVs[0].Value)
}

func TestSingleMemberKeepsDataAcrossRestart(t *testing.T) {
	c := start(t, Options{})
	m := c.Members[0]
	for _, port := range []int{mustPort(t, m.ClientURL), mustPort(t, m.PeerURL)} {
		if port == 2379 || port == 2380 {
			t.Fatalf("member on the standard port %d", port)
		}
	}
	put(t, m, "k", "v")
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, m, "k"); got != "v" {
		t.Fatalf("after a restart k = %q, want v: etcd keeps its data", got)
	}

	if err := m.Freeze(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := m.Do(ctx, "/v3/kv/range", map[string]any{"key": []byte("k")}, nil); err == nil {
		t.Fatal("a frozen member answered")
	}
	if err := m.Thaw(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, m, "k"); got != "v" {
		t.Fatalf("after a thaw k = %q, want v", got)
	}

	dir := c.root
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(m.ClientURL, "http://"), time.Second); err == nil {
		conn.Close()
		t.Fatal("member still accepts connections after Stop")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("folder %s left after Stop: %v", dir, err)
	}
}

func TestClusterElectsANewLeader(t *testing.T) {
	c := start(t, Options{Members: 3})
	if len(c.Members) != 3 {
		t.Fatalf("%d members, want 3", len(c.Members))
	}
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put(t, leader, "k", "v")
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	next, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("leader %s still reported after it was killed", leader.Name)
	}
	if got := get(t, next, "k"); got != "v" {
		t.Fatalf("new leader %s: k = %q, want v", next.Name, got)
	}
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, leader, "k"); got != "v" {
		t.Fatalf("restarted member %s: k = %q, want v", leader.Name, got)
	}
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, m := range c.Members {
		if got := get(t, m, "k"); got != "v" {
			t.Fatalf("member %s after the whole cluster restarted: k = %q, want v", m.Name, got)
		}
	}
}

func TestBadArgsFailClearly(t *testing.T) {
	c, err := StartCluster(Options{Args: []string{"--no-such-option", "1"}})
	if err == nil {
		c.Stop()
		t.Fatal("StartCluster accepted an unknown etcd option")
	}
	t.Log(err)
}

func mustPort(t *testing.T, u string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(u, "http://"))
	n, _ := strconv.Atoi(p)
	if err != nil || n == 0 {
		t.Fatalf("no port in %s", u)
	}
	return n
}
