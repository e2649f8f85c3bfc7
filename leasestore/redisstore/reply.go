package redisstore

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// millis is d in whole milliseconds, rounded up so that a positive TTL
// never becomes zero.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// noNUL rejects strings holding NUL, the separator of packed fields. No
// command-line argument, host name or flag value can hold one.
func noNUL(ss ...string) error {
	for _, s := range ss {
		if strings.Contains(s, sep) {
			return fmt.Errorf("leasestore: %q contains a NUL byte, which the Redis store cannot keep", s)
		}
	}
	return nil
}

// evidence is what Go reads of a run's packed evidence (lua/lib.lua lists
// all its fields; the TTLs and threshold only matter to the scripts).
type evidence struct {
	worker  string
	token   int64
	started time.Time
	attempt int64
	host    string
	pid     int
	command []string
}

// parseEvidence decodes packed evidence.
func parseEvidence(s string) (evidence, error) {
	f := strings.Split(s, sep)
	if len(f) < evidenceFields {
		return evidence{}, fmt.Errorf("corrupt evidence: %d fields, want at least %d", len(f), evidenceFields)
	}
	token, err1 := strconv.ParseInt(f[1], 10, 64)
	offset, err2 := strconv.ParseInt(f[2], 36, 64)
	attempt, err3 := strconv.ParseInt(f[5], 10, 64)
	pid, err4 := strconv.Atoi(f[8])
	if err := cmp.Or(err1, err2, err3, err4); err != nil {
		return evidence{}, fmt.Errorf("corrupt evidence: %w", err)
	}
	return evidence{worker: f[0], token: token, started: time.UnixMicro(token - offset), attempt: attempt,
		host: f[7], pid: pid, command: f[evidenceFields:]}, nil
}

// holder describes the evidence's run as a live lease.
func (e *evidence) holder(job string, expiry time.Time) *leasestore.Holder {
	return &leasestore.Holder{Job: job, Worker: e.worker, Host: e.host, PID: e.pid, Token: e.token, Attempt: e.attempt,
		Command: e.command, StartedAt: e.started, ExpiresAt: expiry}
}

// crash describes the evidence's run as a crash.
func (e *evidence) crash(job string, staleSince, now time.Time, crashes int, quarantined bool) *leasestore.Crash {
	return &leasestore.Crash{Job: job, Holder: e.worker, Host: e.host, PID: e.pid, Token: e.token, Command: e.command,
		StartedAt: e.started, StaleSince: staleSince, DetectedAt: now, Crashes: crashes, Quarantined: quarantined}
}

// eventKinds maps the one-letter kinds of packed events (lua/lib.lua).
var eventKinds = map[string]leasestore.EventKind{
	"a": leasestore.EventAcquired, "r": leasestore.EventReleased, "c": leasestore.EventCrashed,
	"q": leasestore.EventQuarantined, "u": leasestore.EventUnquarantine, "l": leasestore.EventLeaseLost,
	"x": leasestore.EventLateOutcome, "p": leasestore.EventStop,
	"e": leasestore.EventExpect,
}

// reply decodes a script's array reply. The first decoding error sticks in
// err and later accessors return zero values, so a caller checks err once.
type reply struct {
	op  string
	v   any
	err error
}

func (r *reply) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &leasestore.UnavailableError{Op: r.op, Err: fmt.Errorf("unexpected reply from Redis: "+format, args...)}
	}
}

func (r *reply) len() int {
	a, _ := r.v.([]any)
	return len(a)
}

func (r *reply) at(i int) any {
	a, ok := r.v.([]any)
	if !ok || i >= len(a) {
		r.fail("no element %d", i)
		return nil
	}
	return a[i]
}

func (r *reply) str(i int) string {
	switch x := r.at(i).(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	default:
		r.fail("element %d is a %T", i, x)
		return ""
	}
}

func (r *reply) int(i int) int64 {
	s := r.str(i)
	if s == "" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.fail("element %d is %q, not an integer", i, s)
	}
	return n
}

// time decodes microseconds since the Unix epoch.
func (r *reply) time(i int) time.Time {
	return time.UnixMicro(r.int(i))
}

func (r *reply) evidence(i int) *evidence {
	ev, err := parseEvidence(r.str(i))
	if err != nil {
		r.fail("%v", err)
	}
	return &ev
}

// crash decodes {evidence, stale since, crashes, quarantined} at i.
func (r *reply) crash(job string, i int, now time.Time) *leasestore.Crash {
	return r.evidence(i).crash(job, r.time(i+1), now, int(r.int(i+2)), r.int(i+3) == 1)
}

// quarantine decodes {since, reason, by, crashes, last holder, last host}
// at i.
func (r *reply) quarantine(job string, i int) leasestore.Quarantine {
	return leasestore.Quarantine{Job: job, Since: r.time(i), Reason: r.str(i + 1), By: r.str(i + 2),
		Crashes: int(r.int(i + 3)), LastHolder: r.str(i + 4), LastHost: r.str(i + 5)}
}

// record decodes the HGETALL of a record at i.
func (r *reply) record(i int) record {
	a, ok := r.at(i).([]any)
	if !ok {
		r.fail("element %d is not a record", i)
		return nil
	}
	rec := record{}
	for j := 0; j+1 < len(a); j += 2 {
		k, _ := a[j].(string)
		v, _ := a[j+1].(string)
		rec[k] = v
	}
	rec.check(r)
	return rec
}

// history decodes the packed events at i.
func (r *reply) history(i int) []leasestore.Event {
	a, ok := r.at(i).([]any)
	if !ok {
		r.fail("element %d is not a history", i)
		return nil
	}
	var events []leasestore.Event
	for _, x := range a {
		s, _ := x.(string)
		e, err := parseEvent(s)
		if err != nil {
			r.fail("%v", err)
			return nil
		}
		events = append(events, e)
	}
	return events
}

// parseEvent decodes a packed event (lua/lib.lua, event).
func parseEvent(s string) (leasestore.Event, error) {
	f := strings.SplitN(s, sep, 4)
	if len(f) != 4 || len(f[0]) < 2 || eventKinds[f[0][:1]] == "" {
		return leasestore.Event{}, fmt.Errorf("corrupt history event %q", s)
	}
	at, err := strconv.ParseInt(f[0][1:], 36, 64)
	if err != nil {
		return leasestore.Event{}, fmt.Errorf("corrupt history event %q: %w", s, err)
	}
	e := leasestore.Event{At: time.UnixMicro(at), Kind: eventKinds[f[0][:1]], Worker: f[1], Detail: f[3]}
	if f[2] != "" {
		offset, err := strconv.ParseInt(f[2], 36, 64)
		if err != nil {
			return leasestore.Event{}, fmt.Errorf("corrupt history event %q: %w", s, err)
		}
		e.Token = at - offset
	}
	return e, nil
}

// record is a job's record hash (field names in lua/lib.lua).
type record map[string]string

// recordInts are the record's numeric fields.
var recordInts = []string{"t", "a", "c", "m", "s", "q", "qc", "oe", "og", "od", "ot", "of",
	"xe", "xg", "xs"}

// check reports a non-numeric numeric field on r.
func (rec record) check(r *reply) {
	for _, k := range recordInts {
		if _, err := parseOptionalInt(rec[k]); err != nil {
			r.fail("record field %s is %q, not an integer", k, rec[k])
		}
	}
}

func (rec record) int(k string) int64 {
	n, _ := parseOptionalInt(rec[k])
	return n
}

// time decodes microseconds since the Unix epoch; zero when absent.
func (rec record) time(k string) time.Time {
	if rec[k] == "" {
		return time.Time{}
	}
	return time.UnixMicro(rec.int(k))
}

// parseOptionalInt parses a decimal integer; "" is 0.
func parseOptionalInt(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// either is the record's field k, or, when the record has no such field
// (a leasectl older than it wrote the record), field old.
func (rec record) either(k, old string) string {
	if v, ok := rec[k]; ok {
		return v
	}
	return rec[old]
}

// slotRun is a run as status.lua reports it: its slot, evidence and
// liveness expiry (zero when its index entry is gone).
type slotRun struct {
	slot   int
	ev     *evidence
	expiry time.Time
}

// list is the array reply at i, as a reply of its own.
func (r *reply) list(i int) *reply {
	v := r.at(i)
	if _, ok := v.([]any); !ok && r.err == nil {
		r.fail("element %d is not an array", i)
	}
	return &reply{op: r.op, v: v}
}

// runs decodes the runs at i: slot, evidence and index score (empty
// when its entry is gone) of each.
func (r *reply) runs(i int) []slotRun {
	sub := r.list(i)
	var runs []slotRun
	for j := 0; j+2 < sub.len(); j += 3 {
		u := slotRun{slot: int(sub.int(j)), ev: sub.evidence(j + 1)}
		if sub.str(j+2) != "" {
			u.expiry = sub.time(j + 2)
		}
		runs = append(runs, u)
	}
	if sub.err != nil {
		r.fail("%v", sub.err)
	}
	return runs
}

// queue decodes the packed waiters at i (lua/queue.lua), leaving out
// those that lapsed at now.
func (r *reply) queue(i int, now time.Time) []leasestore.Waiter {
	sub := r.list(i)
	var q []leasestore.Waiter
	for j := range sub.len() {
		f := strings.Split(sub.str(j), sep)
		if len(f) != 5 {
			r.fail("corrupt waiter %q", sub.str(j))
			return nil
		}
		pid, err1 := strconv.Atoi(f[2])
		since, err2 := strconv.ParseInt(f[3], 10, 64)
		until, err3 := strconv.ParseInt(f[4], 10, 64)
		if err := cmp.Or(err1, err2, err3); err != nil {
			r.fail("corrupt waiter %q: %v", sub.str(j), err)
			return nil
		}
		w := leasestore.Waiter{Worker: f[0], Host: f[1], PID: pid, Since: time.UnixMicro(since), Until: time.UnixMicro(until)}
		if now.Before(w.Until) {
			q = append(q, w)
		}
	}
	return q
}
