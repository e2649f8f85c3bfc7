package pgstore

import (
	"context"

	"github.com/leasectl/leasectl/leasestore/noticebook"
)

// Notices are rows of the notices table (sql/tables_v6.sql), changed by
// the compare-and-swap functions of sql/notices.sql under the rules of
// package rules: notices are not a hot path, and the rules stay written
// once.

// book is noticebook's Book, embedded in Store unexported: its methods
// are the Store's (leasestore.Notices).
type book = noticebook.Book

// noticeShelf is the Store's notices table.
type noticeShelf Store

func (n *noticeShelf) store() *Store { return (*Store)(n) }

func (n *noticeShelf) Create(ctx context.Context, key string, rec []byte) (bool, error) {
	if err := text(key, string(rec)); err != nil {
		return false, err
	}
	var created bool
	err := n.store().call(ctx, "put notices", n.store().statement("notice_create", "integer", "text", "text"), &created,
		version(), []byte(key), rec)
	return created, err
}

func (n *noticeShelf) Get(ctx context.Context, key string) ([]byte, error) {
	var rec *string
	if err := n.store().call(ctx, "read a notice", n.store().statement("notice_get", "integer", "text"), &rec,
		version(), []byte(key)); err != nil || rec == nil {
		return nil, err
	}
	return []byte(*rec), nil
}

func (n *noticeShelf) Load(ctx context.Context) ([][]byte, error) {
	var recs []string
	if err := n.store().call(ctx, "list notices", n.store().statement("notice_load", "integer"), &recs, version()); err != nil {
		return nil, err
	}
	out := make([][]byte, len(recs))
	for i, rec := range recs {
		out[i] = []byte(rec)
	}
	return out, nil
}

func (n *noticeShelf) Swap(ctx context.Context, key string, old, rec []byte) (bool, error) {
	var swapped bool
	err := n.store().call(ctx, "change a notice", n.store().statement("notice_swap", "integer", "text", "text", "text"), &swapped,
		version(), []byte(key), old, rec)
	return swapped, err
}
