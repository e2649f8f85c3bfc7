// Package noticebook keeps a store's notices (leasestore.Notices) over a
// Shelf, the store's few primitives for JSON records by key: the rules of
// package rules applied once, each change written with a compare-and-swap
// on the record's bytes, so that two reapers never both claim a notice.
//
// It is not a hot path: a claim reads every kept notice (at most
// leasestore.NoticeCap), and each claimed notice is one more swap. What it
// does not guarantee: the clock that times claims and retries is the
// Book's process clock (Book.Now), so hosts whose clocks disagree by more
// than a claim's hold may both deliver a notice, which its key then tells
// the sink is one event.
package noticebook
