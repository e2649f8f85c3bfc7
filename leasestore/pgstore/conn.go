package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore"
)

// poolSize bounds the connections one Store opens. A supervisor makes one
// call at a time (its subscription has a connection of its own); the
// reaper and the on-call commands a few.
const poolSize = 4

// get returns an idle connection, or a new one when none is idle and fewer
// than poolSize are open; else it waits for one within ctx. pooled says
// whether it had served a call before.
func (s *Store) get(ctx context.Context) (c *pgconn.PgConn, pooled bool, err error) {
	for {
		select {
		case c := <-s.idle:
			if alive(ctx, c) {
				return c, true, nil
			}
			s.discard(c)
			continue
		default:
		}
		select {
		case c := <-s.idle:
			if alive(ctx, c) {
				return c, true, nil
			}
			s.discard(c)
		case s.slots <- struct{}{}:
			c, err := s.dial(ctx, s.cfg)
			if err != nil {
				<-s.slots
				return nil, false, err
			}
			return c, false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// dial opens a connection with cfg: to one of its hosts, as dialHosts
// does, when it names several.
func (s *Store) dial(ctx context.Context, cfg *pgconn.Config) (*pgconn.PgConn, error) {
	if s.closed.Load() {
		return nil, leasestore.ErrClosed
	}
	if names, byName := hosts(cfg); names != nil {
		return s.dialHosts(ctx, names, byName)
	}
	return s.dialOne(ctx, cfg)
}

// dialOne opens a connection with cfg as pgconn does.
func (s *Store) dialOne(ctx context.Context, cfg *pgconn.Config) (*pgconn.PgConn, error) {
	if s.preferTLS != nil {
		cfg = cfg.Copy()
		cfg.DialFunc = negotiatingDial(cfg.DialFunc, s.preferTLS)
	}
	return pgconn.ConnectConfig(ctx, cfg)
}

// put gives c back to the pool, or closes it when it cannot serve another
// call (its call was interrupted, or the store is closed).
func (s *Store) put(c *pgconn.PgConn) {
	if c.IsClosed() || c.IsBusy() || c.TxStatus() != 'I' || s.closed.Load() {
		s.discard(c)
		return
	}
	s.idle <- c
}

// discard closes c and frees its slot.
func (s *Store) discard(c *pgconn.PgConn) {
	closeConn(c)
	<-s.slots
}

// closeConn closes c, waiting at most a moment for the server: a frozen
// server must not hold up a caller that gives up on it.
func closeConn(c *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	c.Close(ctx)
}

// call runs one statement that returns one JSON value and decodes it into
// v. The statement is one function call, so one transaction. When the
// schema is missing or at another version, call migrates it and runs the
// statement again: the first attempt failed before doing anything. It
// never retries a statement that may have reached the server, except on a
// fresh connection after a pooled one turned out dead before any byte of
// it was sent (pgconn.SafeToRetry).
func (s *Store) call(ctx context.Context, op, sql string, v any, args ...[]byte) error {
	err := s.exec(ctx, sql, v, args)
	if needsMigration(err) {
		if merr := s.migrateForCall(ctx, err); merr != nil {
			return s.unavailable(op, merr)
		}
		err = s.exec(ctx, sql, v, args)
	}
	if err != nil {
		return s.unavailable(op, err)
	}
	return nil
}

// exec runs sql with args on a connection of the pool and decodes its one
// value into v.
func (s *Store) exec(ctx context.Context, sql string, v any, args [][]byte) error {
	for attempt := 0; ; attempt++ {
		c, pooled, err := s.get(ctx)
		if err != nil {
			return err
		}
		raw, err := queryValue(ctx, c, sql, args)
		s.put(c)
		if err != nil {
			if pooled && attempt == 0 && pgconn.SafeToRetry(err) && ctx.Err() == nil {
				continue
			}
			return err
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return fmt.Errorf("unexpected answer %q: %w", raw, err)
		}
		return nil
	}
}

// queryValue runs sql with args in text format and returns the first
// column of its one row.
func queryValue(ctx context.Context, c *pgconn.PgConn, sql string, args [][]byte) ([]byte, error) {
	rr := c.ExecParams(ctx, sql, args, nil, nil, nil)
	var raw []byte
	for rr.NextRow() {
		if vals := rr.Values(); len(vals) > 0 && raw == nil {
			raw = append([]byte{}, vals[0]...)
		}
	}
	if _, err := rr.Close(); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, errors.New("no answer row")
	}
	return raw, nil
}
