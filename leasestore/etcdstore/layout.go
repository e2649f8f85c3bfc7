package etcdstore

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The keys of a namespace <ns> (docs/etcd.md), one per job of each kind:
//
//	<ns>#live/<job>         liveness: the run's token, attached to an etcd
//	                        lease of --ttl (Renew keeps it alive); etcd
//	                        deletes it when the lease expires
//	<ns>#ev/<job>           evidence (JSON), attached to the job's etcd
//	                        lease of --evidence-ttl, kept alive with the
//	                        liveness
//	<ns>#job/<job>          record and history (JSON), persistent
//	<ns>#quarantined/<job>  the quarantine (JSON), while the job is
//	                        quarantined: the index Quarantined reads
//	<ns>#due/<µs>/<job>     the job's expectation and last success (JSON),
//	                        while it has an expectation, keyed by its due
//	                        time (20 digits): the index Overdue reads
//
// '#' cannot occur in a namespace or a job ID, so no namespace's keys fall
// in another's prefix, and the keys of one kind share a prefix that Scan,
// Leases and Counts read as a range. Every transition compares the mod
// revisions of the three per-job keys it read (the quarantine and due keys are
// written only with the record, so the record's revision guards them).
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
	job           string
	live, ev, doc *keyValue // nil when the key does not exist
	evd           *evidence // the evidence, when ev exists
	rec           *record   // the record, zero for a job never seen
	liveToken     int64     // the token the liveness carries
}

// crashed reports whether the job has evidence without liveness.
func (st *jobState) crashed() bool { return st.ev != nil && st.live == nil }

// readOps reads the three per-job keys of job.
func (s *Store) readOps(job string) []requestOp {
	return []requestOp{
		{Range: &rangeRequest{Key: s.key(kindLive, job)}},
		{Range: &rangeRequest{Key: s.key(kindEvidence, job)}},
		{Range: &rangeRequest{Key: s.key(kindJob, job)}},
	}
}

// parseStates turns the answers to the readOps of jobs into their states.
func parseStates(jobs []string, resp []responseOp) ([]*jobState, error) {
	if len(resp) != 3*len(jobs) {
		return nil, fmt.Errorf("%d answers to %d reads", len(resp), 3*len(jobs))
	}
	states := make([]*jobState, len(jobs))
	for i, job := range jobs {
		st := &jobState{job: job, rec: &record{}}
		kvs := [3]**keyValue{&st.live, &st.ev, &st.doc}
		for j, dst := range kvs {
			r := resp[3*i+j].Range
			if r == nil {
				return nil, fmt.Errorf("answer %d is not a range", 3*i+j)
			}
			if len(r.KVs) > 0 {
				*dst = &r.KVs[0]
			}
		}
		if st.live != nil {
			st.liveToken, _ = strconv.ParseInt(string(st.live.Value), 10, 64)
		}
		if st.ev != nil {
			st.evd = &evidence{}
			if err := json.Unmarshal(st.ev.Value, st.evd); err != nil {
				return nil, fmt.Errorf("evidence of job %q is not leasectl's: %w", job, err)
			}
		}
		if st.doc != nil {
			if err := json.Unmarshal(st.doc.Value, st.rec); err != nil {
				return nil, fmt.Errorf("record of job %q is not leasectl's: %w", job, err)
			}
		}
		states[i] = st
	}
	return states, nil
}

// answerOf is the answer to a read of one key that found kv (nil: none),
// for parseStates.
func answerOf(kv *keyValue) responseOp {
	r := &rangeResponse{}
	if kv != nil {
		r.KVs = []keyValue{*kv}
	}
	return responseOp{Range: r}
}

// guards compare the mod revisions of the keys st was read with.
func (s *Store) guards(st *jobState) []compare {
	rev := func(kv *keyValue) int64 {
		if kv == nil {
			return 0
		}
		return kv.ModRevision
	}
	return []compare{
		{Key: s.key(kindLive, st.job), Target: "MOD", Result: "EQUAL", ModRevision: rev(st.live)},
		{Key: s.key(kindEvidence, st.job), Target: "MOD", Result: "EQUAL", ModRevision: rev(st.ev)},
		{Key: s.key(kindJob, st.job), Target: "MOD", Result: "EQUAL", ModRevision: rev(st.doc)},
	}
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
