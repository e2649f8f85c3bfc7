package noticebook

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// Shelf is where a store keeps its notices: records by key, each changed
// only if it is still what its writer read.
type Shelf interface {
	// Create stores rec under key unless key is there, and reports whether
	// it did.
	Create(ctx context.Context, key string, rec []byte) (bool, error)
	// Get returns key's record; nil when there is none.
	Get(ctx context.Context, key string) ([]byte, error)
	// Load returns every record.
	Load(ctx context.Context) ([][]byte, error)
	// Swap replaces key's record by rec (nil: deletes it) if it still is
	// old, and reports whether it did.
	Swap(ctx context.Context, key string, old, rec []byte) (bool, error)
}

// maxSettleTries bounds the swaps a settlement retries when another
// writer changed the notice between its read and its write (a claim of
// another owner, a prune).
const maxSettleTries = 5

// Book is a store's notices over a Shelf.
type Book struct {
	Shelf Shelf
	// Now is the clock of claims, retries and retention; nil: the
	// process's clock.
	Now func() time.Time
	// Retention and Cap bound what is kept; zero: leasestore's
	// NoticeRetention and NoticeCap.
	Retention time.Duration
	Cap       int
}

func (b *Book) now() time.Time {
	if b.Now != nil {
		return b.Now().UTC().Truncate(time.Microsecond)
	}
	return time.Now().UTC().Truncate(time.Microsecond)
}

// PutNotices records the notices whose keys are not kept; see
// leasestore.Notices. Recording one prunes what is past the retention or
// the cap.
func (b *Book) PutNotices(ctx context.Context, notices []leasestore.Notice) error {
	now, created := b.now(), false
	for _, n := range notices {
		rec, err := json.Marshal(rules.NewNotice(n, now))
		if err != nil {
			return fmt.Errorf("encode notice %q: %w", n.Key, err)
		}
		ok, err := b.Shelf.Create(ctx, n.Key, rec)
		if err != nil {
			return err
		}
		created = created || ok
	}
	if !created {
		return nil
	}
	_, err := b.load(ctx, now)
	return err
}

// ClaimNotices claims up to limit due notices for owner; see
// leasestore.Notices.
func (b *Book) ClaimNotices(ctx context.Context, owner string, limit int, hold time.Duration) ([]leasestore.Notice, error) {
	if owner == "" || hold <= 0 || limit < 1 {
		return nil, fmt.Errorf("claim notices: an owner, a positive hold and a positive limit are needed (owner %q, hold %s, limit %d)", owner, hold, limit)
	}
	now := b.now()
	kept, err := b.load(ctx, now)
	if err != nil {
		return nil, err
	}
	var claimed []leasestore.Notice
	for _, k := range kept {
		if len(claimed) == min(limit, leasestore.MaxNoticeClaim) {
			break
		}
		n := k.notice
		if !rules.ClaimNotice(&n, owner, hold, now) {
			continue
		}
		ok, err := b.swap(ctx, k, &n)
		if err != nil {
			return claimed, err
		}
		if ok {
			claimed = append(claimed, n)
		}
	}
	return claimed, nil
}

// SettleNotice ends owner's claim on the notice with key; see
// leasestore.Notices.
func (b *Book) SettleNotice(ctx context.Context, key, owner string, s leasestore.Settlement) error {
	for range maxSettleTries {
		rec, err := b.Shelf.Get(ctx, key)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("settle notice %q: %w", key, leasestore.ErrNoticeNotHeld)
		}
		k, err := decode(rec)
		if err != nil {
			return err
		}
		n := k.notice
		if err := rules.SettleNotice(&n, owner, s, b.now()); err != nil {
			return err
		}
		ok, err := b.swap(ctx, k, &n)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("settle notice %q: it kept changing under %d tries", key, maxSettleTries)
}

// ListNotices returns the kept notices, oldest first.
func (b *Book) ListNotices(ctx context.Context) ([]leasestore.Notice, error) {
	kept, err := b.load(ctx, b.now())
	if err != nil {
		return nil, err
	}
	list := make([]leasestore.Notice, len(kept))
	for i, k := range kept {
		list[i] = k.notice
	}
	return list, nil
}

// kept is a notice with the bytes it was read as, for a swap.
type kept struct {
	notice leasestore.Notice
	rec    []byte
}

func decode(rec []byte) (kept, error) {
	var k kept
	if err := json.Unmarshal(rec, &k.notice); err != nil {
		return k, fmt.Errorf("a kept notice is not JSON: %w", err)
	}
	k.rec = rec
	return k, nil
}

func (b *Book) swap(ctx context.Context, k kept, n *leasestore.Notice) (bool, error) {
	rec, err := json.Marshal(n)
	if err != nil {
		return false, fmt.Errorf("encode notice %q: %w", n.Key, err)
	}
	return b.Shelf.Swap(ctx, n.Key, k.rec, rec)
}

// load reads the kept notices, oldest first, and drops those past the
// retention or the cap at now. A record that is not a notice is skipped.
func (b *Book) load(ctx context.Context, now time.Time) ([]kept, error) {
	recs, err := b.Shelf.Load(ctx)
	if err != nil {
		return nil, err
	}
	all := make([]kept, 0, len(recs))
	list := make([]leasestore.Notice, 0, len(recs))
	for _, rec := range recs {
		if k, err := decode(rec); err == nil {
			all, list = append(all, k), append(list, k.notice)
		}
	}
	if drop := rules.PruneNotices(list, now, cmp.Or(b.Retention, leasestore.NoticeRetention), cmp.Or(b.Cap, leasestore.NoticeCap)); len(drop) > 0 {
		dropped := make(map[string]bool, len(drop))
		for _, key := range drop {
			dropped[key] = true
		}
		for _, k := range all {
			if !dropped[k.notice.Key] {
				continue
			}
			if _, err := b.Shelf.Swap(ctx, k.notice.Key, k.rec, nil); err != nil {
				return nil, err
			}
		}
		all = slices.DeleteFunc(all, func(k kept) bool { return dropped[k.notice.Key] })
	}
	slices.SortFunc(all, func(x, y kept) int { return rules.ByAge(x.notice, y.notice) })
	return all, nil
}
