package redisstore

import (
	"net"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRelocateNamesNodesAsGoRedisWould: the slot map leasectl loads itself
// names its nodes as go-redis's own loader would, relative to the seed
// that answered, and a loopback node go-redis renames ":port" gets its
// client on the address the seed gave.
func TestRelocateNamesNodesAsGoRedisWould(t *testing.T) {
	for _, tt := range []struct {
		origin, node, want string
		loopback           bool // newClient maps ":port" back to want
	}{
		{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7001", true},
		{"10.0.0.5:7000", "127.0.0.1:7001", "10.0.0.5:7001", false},
		{"redis.example:7000", "127.0.0.1:7001", "redis.example:7001", false},
		{"10.0.0.5:7000", "10.0.0.6:7001", "10.0.0.6:7001", false},
		{"10.0.0.5:6380", "10.0.0.6:0", "10.0.0.6:6380", false}, // a TLS-only cluster
	} {
		n := &clusterNodes{byAddr: map[string]*redis.Client{}, loopback: map[string]string{}}
		slots := []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: tt.node}}}}
		n.relocate(slots, tt.origin)
		if got := slots[0].Nodes[0].Addr; got != tt.want {
			t.Errorf("node %s from seed %s named %s, want %s", tt.node, tt.origin, got, tt.want)
		}
		_, port, _ := net.SplitHostPort(tt.want)
		c := n.newClient(&redis.Options{Addr: ":" + port})
		defer c.Close()
		if got := c.Options().Addr; (got == tt.want) != tt.loopback {
			t.Errorf("node %s from seed %s: client for %q dials %s; loopback kept: %v", tt.node, tt.origin, ":"+port, got, tt.loopback)
		}
	}
}
