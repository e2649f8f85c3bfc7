package etcdstore

import (
	"bytes"
	"context"

	"github.com/leasectl/leasectl/leasestore/noticebook"
)

// Notices are keys of their own, <ns>#notice/<key>, each a JSON record,
// changed by a transaction guarded by the mod revision read with it (a
// create by its absence), under the rules of package rules.

const kindNotice = "notice"

// book is noticebook's Book, embedded in Store unexported: its methods
// are the Store's (leasestore.Notices).
type book = noticebook.Book

// noticeShelf is the Store's notice keys.
type noticeShelf Store

// swapIf writes op if key's mod revision is still rev (0: absent), and
// reports whether it did.
func (n *noticeShelf) swapIf(ctx context.Context, op string, key []byte, rev int64, write requestOp) (bool, error) {
	req := txnRequest{Compare: []compare{{Key: key, Target: "MOD", Result: "EQUAL", ModRevision: rev}}, Success: []requestOp{write}}
	var resp txnResponse
	if err := n.c.call(ctx, "/v3/kv/txn", req, &resp); err != nil {
		return false, (*Store)(n).unavailable(op, err)
	}
	return resp.Succeeded, nil
}

func (n *noticeShelf) Create(ctx context.Context, key string, rec []byte) (bool, error) {
	k := (*Store)(n).key(kindNotice, key)
	return n.swapIf(ctx, "put notices", k, 0, requestOp{Put: &putRequest{Key: k, Value: rec}})
}

// get reads key's record and its mod revision; nil when there is none.
func (n *noticeShelf) get(ctx context.Context, key string) (*keyValue, error) {
	var resp rangeResponse
	if err := n.c.call(ctx, "/v3/kv/range", &rangeRequest{Key: (*Store)(n).key(kindNotice, key)}, &resp); err != nil {
		return nil, (*Store)(n).unavailable("read a notice", err)
	}
	if len(resp.KVs) == 0 {
		return nil, nil
	}
	return &resp.KVs[0], nil
}

func (n *noticeShelf) Get(ctx context.Context, key string) ([]byte, error) {
	kv, err := n.get(ctx, key)
	if err != nil || kv == nil {
		return nil, err
	}
	return kv.Value, nil
}

func (n *noticeShelf) Load(ctx context.Context) ([][]byte, error) {
	var resp rangeResponse
	if err := n.c.call(ctx, "/v3/kv/range", (*Store)(n).rangeOf(kindNotice, false, false), &resp); err != nil {
		return nil, (*Store)(n).unavailable("list notices", err)
	}
	recs := make([][]byte, len(resp.KVs))
	for i, kv := range resp.KVs {
		recs[i] = kv.Value
	}
	return recs, nil
}

func (n *noticeShelf) Swap(ctx context.Context, key string, old, rec []byte) (bool, error) {
	kv, err := n.get(ctx, key)
	if err != nil || kv == nil || !bytes.Equal(kv.Value, old) {
		return false, err
	}
	write := requestOp{Put: &putRequest{Key: kv.Key, Value: rec}}
	if rec == nil {
		write = requestOp{Delete: &deleteRequest{Key: kv.Key}}
	}
	return n.swapIf(ctx, "change a notice", kv.Key, kv.ModRevision, write)
}
