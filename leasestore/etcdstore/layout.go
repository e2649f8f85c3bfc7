package etcdstore

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The keys of a namespace <ns> (docs/etcd.md), one per job of each kind,
// and for the liveness and the evidence one per slot in use (slots.go):
//
//	<ns>#live/<job>[#<slot>]  liveness: the run's token, attached to an
//	                          etcd lease of --ttl (Renew keeps it alive);
//	                          etcd deletes it when the lease expires
//	<ns>#ev/<job>[#<slot>]    evidence (JSON), attached to an etcd lease
//	                          of --evidence-ttl, kept alive with the
//	                          liveness
//	<ns>#job/<job>            record, queue of waiters and history (JSON),
//	                          persistent
//	<ns>#quarantined/<job>    the quarantine (JSON), while the job is
//	                          quarantined: the index Quarantined reads
//	<ns>#due/<µs>/<job>       the job's expectation and last success
//	                          (JSON), while it has an expectation, keyed
//	                          by its due time (20 digits): the index
//	                          Overdue reads
//
// Slot 0's keys carry no suffix: a job of one slot has the keys a store of
// one run per job always wrote. '#' cannot occur in a namespace or a job
// ID, so no namespace's keys fall in another's prefix, and the keys of one
// kind share a prefix that Scan, Leases and Counts read as a range.
// Every transition is guarded (guards) by the record's mod revision and by
// the liveness and evidence ranges of the job as it read them (the
// quarantine and due keys are written only with the record, so the
// record's revision guards them).
const (
	kindLive        = "live"
	kindEvidence    = "ev"
	kindJob         = "job"
	kindQuarantined = "quarantined"
	kindDue         = "due"
)

// key is the key of job of kind.
func (s *Store) key(kind, job string) []byte { return []byte(s.ns + "#" + kind + "/" + job) }

// prefix is the prefix of every key of kind.
func (s *Store) prefix(kind string) []byte { return []byte(s.ns + "#" + kind + "/") }

// rangeOf reads every key of kind.
func (s *Store) rangeOf(kind string, keysOnly, countOnly bool) *rangeRequest {
	p := s.prefix(kind)
	end := append([]byte(nil), p...)
	end[len(end)-1]++ // "/" + 1: just past every key with the prefix
	return &rangeRequest{Key: p, RangeEnd: end, KeysOnly: keysOnly, CountOnly: countOnly}
}

// evidence is what a run leaves behind while it lasts: the rules' run
// without its expiries, which are its keys' etcd leases. Its round trip
// (RTT) is written by Renew only when it moved by more than rttSlack allows
// (store.go), and is absent in evidence written before round trips were
// kept.
type evidence = rules.Run

// record is what the store keeps of a job between runs, with its history:
// the rules' record without its run (which is the liveness and evidence
// keys) and, apart, its history, in the JSON names the store has always
// written. Records written before regions or the holder that gave up were
// kept have none: their jobs are unrestricted until a grant that names a
// region, and a leasectl older than RecordLate on etcd drops Abandoned when
// it rewrites the record.
type record struct {
	rules.Record
	History []leasestore.Event `json:"history,omitempty"`
	// LiveLease and EvidenceLease are the etcd leases the last run's
	// liveness and evidence were attached to. The next run takes them over
	// while they live (its Acquire keeps them alive, and grants new ones
	// only once they expired or their TTL differs), so a release need not
	// revoke them: what is left after a run is two leases per job, holding
	// no key, that expire --ttl and --evidence-ttl after its last run.
	LiveLease     int64 `json:"live_lease,omitempty"`
	EvidenceLease int64 `json:"evidence_lease,omitempty"`
	// SlotLeases are the same of the runs of slots 1 and up, by slot
	// from 1: a slot's etcd leases serve only that slot's next run, so no
	// two live runs share one.
	SlotLeases []leasePair `json:"slot_leases,omitempty"`
	// Wakes counts the transitions that woke the job's waiters (a release,
	// a waiter leaving while a slot is free): Subscribe wakes a waiter when
	// it changes (watch.go), and Turn is the waiters whose turn it was at
	// the last one (rules.Record.Turn; written, empty too, with every
	// wake-up): a subscription made for a waiter not in it sleeps on. A
	// leasectl older than Turn moves Wakes without it, and wakes everyone.
	Wakes int64     `json:"wakes,omitempty"`
	Turn  *[]string `json:"turn,omitempty"`
}

// leasePair is the etcd leases of one slot's liveness and evidence.
type leasePair struct {
	Live     int64 `json:"live,omitempty"`
	Evidence int64 `json:"evidence,omitempty"`
}

// leasesOf is the etcd leases of slot's last run, zero when it had none.
func (r *record) leasesOf(slot int) leasePair {
	if slot == 0 {
		return leasePair{r.LiveLease, r.EvidenceLease}
	}
	if slot <= len(r.SlotLeases) {
		return r.SlotLeases[slot-1]
	}
	return leasePair{}
}

// setLeases records the etcd leases of slot's new run.
func (r *record) setLeases(slot int, p leasePair) {
	if slot == 0 {
		r.LiveLease, r.EvidenceLease = p.Live, p.Evidence
		return
	}
	if n := slot - len(r.SlotLeases); n > 0 {
		r.SlotLeases = append(r.SlotLeases, make([]leasePair, n)...)
	}
	r.SlotLeases = append([]leasePair(nil), r.SlotLeases...)
	r.SlotLeases[slot-1] = p
}

// event appends e at now to the history, dropping the oldest beyond
// HistoryLimit. Times come from the clocks of different hosts, so an event
// is never stamped before the one it follows.
func (r *record) event(now time.Time, e leasestore.Event) {
	e.At = now
	if n := len(r.History); n > 0 && r.History[n-1].At.After(now) {
		e.At = r.History[n-1].At
	}
	r.History = append(r.History, e)
	if over := len(r.History) - leasestore.HistoryLimit; over > 0 {
		r.History = append([]leasestore.Event(nil), r.History[over:]...)
	}
}

// jobState is one job's keys as read in one revision.
type jobState struct {
	job string
	// rev is the revision the keys were read at (or written at, for a
	// state this client wrote): the guards refuse any write to the job's
	// liveness and evidence ranges after it.
	rev      int64
	live, ev []keyValue // the job's liveness and evidence keys, by key
	doc      *keyValue  // the record; nil when the key does not exist
	rec      *record    // the record, zero for a job never seen
	slots    []*slotState
}

// slotState is one slot's keys, of a slot with at least one of them.
type slotState struct {
	slot      int
	live, ev  *keyValue // nil when the key does not exist
	evd       *evidence // the evidence, when ev exists
	liveToken int64     // the token the liveness carries
}

// slot is the state of the job's slot n, nil when it has no key.
func (st *jobState) slot(n int) *slotState {
	for _, ss := range st.slots {
		if ss.slot == n {
			return ss
		}
	}
	return nil
}

// crashed reports whether the job has a slot with evidence without
// liveness.
func (st *jobState) crashed() bool {
	return slices.ContainsFunc(st.slots, func(ss *slotState) bool { return ss.ev != nil && ss.live == nil })
}

// readOps reads the keys of job: its liveness and evidence ranges and its
// record.
func (s *Store) readOps(job string) []requestOp {
	return []requestOp{
		{Range: s.slotsRange(kindLive, job)},
		{Range: s.slotsRange(kindEvidence, job)},
		{Range: &rangeRequest{Key: s.key(kindJob, job)}},
	}
}

// parseStates turns the answers to the readOps of jobs, read at revision
// rev, into their states.
func (s *Store) parseStates(jobs []string, resp []responseOp, rev int64) ([]*jobState, error) {
	if len(resp) != 3*len(jobs) {
		return nil, fmt.Errorf("%d answers to %d reads", len(resp), 3*len(jobs))
	}
	states := make([]*jobState, len(jobs))
	for i, job := range jobs {
		for j := range 3 {
			if resp[3*i+j].Range == nil {
				return nil, fmt.Errorf("answer %d is not a range", 3*i+j)
			}
		}
		st := &jobState{job: job, rev: rev, rec: &record{},
			live: resp[3*i].Range.KVs, ev: resp[3*i+1].Range.KVs}
		if kvs := resp[3*i+2].Range.KVs; len(kvs) > 0 {
			st.doc = &kvs[0]
			if err := json.Unmarshal(st.doc.Value, st.rec); err != nil {
				return nil, fmt.Errorf("record of job %q is not leasectl's: %w", job, err)
			}
		}
		if err := s.parseSlots(st); err != nil {
			return nil, err
		}
		states[i] = st
	}
	return states, nil
}

// guards refuse a transaction when a key of st's job changed since st was
// read: its record's mod revision is not the one read, a key of its
// liveness or evidence range was written (or created) since, or one of
// its evidence keys was deleted (its run released, its crash counted, or
// its evidence expired). A liveness key that etcd deleted since, its lease
// expired, is let through: that only frees a slot the decision counted as
// held (docs/etcd.md, Safety).
func (s *Store) guards(st *jobState) []compare {
	rev := int64(0)
	if st.doc != nil {
		rev = st.doc.ModRevision
	}
	live, ev := s.slotsRange(kindLive, st.job), s.slotsRange(kindEvidence, st.job)
	c := []compare{
		{Key: s.key(kindJob, st.job), Target: "MOD", Result: "EQUAL", ModRevision: rev},
		{Key: live.Key, RangeEnd: live.RangeEnd, Target: "MOD", Result: "LESS", ModRevision: st.rev + 1},
		{Key: ev.Key, RangeEnd: ev.RangeEnd, Target: "MOD", Result: "LESS", ModRevision: st.rev + 1},
	}
	for _, kv := range st.ev {
		c = append(c, compare{Key: kv.Key, Target: "MOD", Result: "EQUAL", ModRevision: kv.ModRevision})
	}
	return c
}

// putJSON is a put of v as JSON.
func putJSON(key []byte, v any, lease int64) (requestOp, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return requestOp{}, err
	}
	return requestOp{Put: &putRequest{Key: key, Value: b, Lease: lease}}, nil
}

func del(key []byte) requestOp { return requestOp{Delete: &deleteRequest{Key: key}} }
