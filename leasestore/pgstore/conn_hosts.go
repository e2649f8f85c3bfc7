package pgstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore/failover"
)

// hosts splits cfg, a configuration of several hosts (host=a,b,c as libpq
// reads it), into one configuration per address, in the URL's order, each
// with the attempts pgconn makes at that address (TLS, then plain, as
// sslmode says). It returns nil for a configuration of one address.
func hosts(cfg *pgconn.Config) (names []string, byName map[string]*pgconn.Config) {
	byName = map[string]*pgconn.Config{}
	for _, fb := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...) {
		name := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port)))
		c, ok := byName[name]
		if !ok {
			c = cfg.Copy()
			c.Host, c.Port, c.TLSConfig, c.Fallbacks = fb.Host, fb.Port, fb.TLSConfig, nil
			byName[name] = c
			names = append(names, name)
			continue
		}
		c.Fallbacks = append(c.Fallbacks, fb)
	}
	if len(names) < 2 {
		return nil, nil
	}
	return names, byName
}

// dialHosts opens a connection to one of several hosts. pgconn tries them
// one after the other, each until connect_timeout (without it, until ctx
// ends): a host that is silent (a frozen server, a blackholed address)
// would hold every new connection for the call's whole deadline. The hosts
// are tried as failover.Do sends a request instead: the next once the last
// has not connected within the hedge bound, or failed (refused, or not the
// read-write server target_session_attrs asks for); the first connection
// made is kept and the others are closed. Connecting changes nothing on a
// server, so a second attempt is always safe. Hosts that went silent are
// tried last for a while, by the processes that start on this host
// meanwhile too. An established connection whose server goes silent is not
// covered: its call ends by its deadline.
func (s *Store) dialHosts(ctx context.Context, names []string, byName map[string]*pgconn.Config) (*pgconn.PgConn, error) {
	var mu sync.Mutex
	var made []*pgconn.PgConn
	done := false
	c, err := failover.Do(ctx, failover.New(names, failover.DefaultNotes()), func(ctx context.Context, name string) (*pgconn.PgConn, error) {
		c, err := s.dialOne(ctx, byName[name])
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if done {
			closeConn(c)
			return nil, errAnsweredElsewhere
		}
		made = append(made, c)
		return c, nil
	}, func(error) bool { return true })
	mu.Lock()
	defer mu.Unlock()
	done = true
	for _, m := range made {
		if m != c {
			closeConn(m)
		}
	}
	return c, err
}

// errAnsweredElsewhere ends a connection made after another host's.
var errAnsweredElsewhere = errors.New("connected to another host first")
