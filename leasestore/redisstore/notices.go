package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/noticebook"
)

// Notices are one hash, <ns>:{notices}, notice key -> JSON record, in one
// Cluster slot of its own, changed by a compare-and-swap script
// (lua/noticeswap.lua) under the rules of package rules: notices are not a
// hot path, and the rules stay written once.

//go:embed lua/noticeswap.lua
var luaNoticeSwap string

var scriptNoticeSwap = sync.OnceValue(func() *redis.Script { return redis.NewScript(luaNoticeSwap) })

func (s *Store) notices() *noticebook.Book { return &noticebook.Book{Shelf: (*noticeShelf)(s)} }

// PutNotices records notices not yet kept; see leasestore.Notices.
func (s *Store) PutNotices(ctx context.Context, notices []leasestore.Notice) error {
	return s.notices().PutNotices(ctx, notices)
}

// ClaimNotices claims due notices for owner; see leasestore.Notices.
func (s *Store) ClaimNotices(ctx context.Context, owner string, limit int, hold time.Duration) ([]leasestore.Notice, error) {
	return s.notices().ClaimNotices(ctx, owner, limit, hold)
}

// SettleNotice ends owner's claim on a notice; see leasestore.Notices.
func (s *Store) SettleNotice(ctx context.Context, key, owner string, st leasestore.Settlement) error {
	return s.notices().SettleNotice(ctx, key, owner, st)
}

// ListNotices returns the kept notices; see leasestore.Notices.
func (s *Store) ListNotices(ctx context.Context) ([]leasestore.Notice, error) {
	return s.notices().ListNotices(ctx)
}

// noticeShelf is the Store's notices hash.
type noticeShelf Store

func (n *noticeShelf) key() string { return n.ns + ":{notices}" }

func (n *noticeShelf) Create(ctx context.Context, key string, rec []byte) (bool, error) {
	ok, err := n.rdb.HSetNX(ctx, n.key(), key, rec).Result()
	if err != nil {
		return false, (*Store)(n).unavailable("put notices", err)
	}
	return ok, nil
}

func (n *noticeShelf) Get(ctx context.Context, key string) ([]byte, error) {
	rec, err := n.rdb.HGet(ctx, n.key(), key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, (*Store)(n).unavailable("read a notice", err)
	}
	return rec, nil
}

func (n *noticeShelf) Load(ctx context.Context) ([][]byte, error) {
	vals, err := n.rdb.HVals(ctx, n.key()).Result()
	if err != nil {
		return nil, (*Store)(n).unavailable("list notices", err)
	}
	recs := make([][]byte, len(vals))
	for i, v := range vals {
		recs[i] = []byte(v)
	}
	return recs, nil
}

func (n *noticeShelf) Swap(ctx context.Context, key string, old, rec []byte) (bool, error) {
	v, err := (*Store)(n).run(ctx, "change a notice", scriptNoticeSwap, []string{n.key()}, key, old, rec)
	if err != nil {
		return false, err
	}
	return v == int64(1), nil
}
