package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"sync"

	"github.com/leasectl/leasectl/leasestore/noticebook"
	"github.com/redis/go-redis/v9"
)

// Notices are one hash, <ns>:{notices}, notice key -> JSON record, in one
// Cluster slot of its own, changed by a compare-and-swap script
// (lua/noticeswap.lua) under the rules of package rules: notices are not a
// hot path, and the rules stay written once.

//go:embed lua/noticeswap.lua
var luaNoticeSwap string

var scriptNoticeSwap = sync.OnceValue(func() *redis.Script { return redis.NewScript(luaNoticeSwap) })

// book is noticebook's Book, embedded in Store unexported: its methods
// are the Store's (leasestore.Notices).
type book = noticebook.Book

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
