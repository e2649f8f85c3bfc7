package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// syncTimeout bounds a replica's first sync: only a hang takes this long.
const syncTimeout = 30 * time.Second

// primaryWithReplica starts a primary and one replica following it, and
// returns them once the replica is in sync.
func primaryWithReplica(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	// Without the default 5 s delay before a primary's first full sync.
	primary = ownRedis(t, "--repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(primary.Addr, ":")
	replica = ownRedis(t, "--replicaof", host, port)
	deadline := time.Now().Add(syncTimeout)
	for {
		info, err := replica.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return primary, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not in sync after %s: %v\n%s", syncTimeout, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMinReplicasGrantsOnlyWhatReplicasHave(t *testing.T) {
	primary, replica := primaryWithReplica(t)
	s := openRedis(t, primary.URL+"?min_replicas=1", "ns")
	l := storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	// What the grant wrote is on the replica before Acquire returned.
	keys := s.jobKeys("job")
	if ev, err := replica.Do("EXISTS", keys[0]); err != nil || ev != "1" {
		t.Fatalf("evidence on the replica after a min_replicas=1 grant: %q, %v", ev, err)
	}
	if err := s.Renew(redisCall(t, storetest.HangGuard), l); err != nil {
		t.Fatalf("Renew with the replica in sync: %v", err)
	}

	if err := replica.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer replica.Thaw()
	err := s.Renew(redisCall(t, time.Second), l)
	var repl *ReplicationError
	if !errors.As(err, &repl) || !errors.Is(err, leasestore.ErrUnavailable) || repl.Acked != 0 || repl.Want != 1 {
		t.Fatalf("Renew with the replica frozen = %v, want an unavailable store naming 0 of 1 replica", err)
	}
	_, err = s.Acquire(redisCall(t, time.Second), storetest.Request("other", "w2", storetest.LongTTL))
	if !errors.As(err, &repl) {
		t.Fatalf("Acquire with the replica frozen = %v, want a *ReplicationError", err)
	}
	// The grant nobody will run was released as not started, not left to
	// hold the job and count as a crash.
	plain := openRedis(t, primary.URL, "ns")
	undone := fmt.Sprintf("the grant did not reach min_replicas=%d replica(s)", 1)
	if st := storetest.Status(t, plain, "other"); st.LastOutcome == nil || st.LastOutcome.Result != leasestore.ResultNotStarted || st.LastOutcome.Reason != undone {
		t.Errorf("after an unreplicated grant: last outcome %+v; want not-started, %q", st.LastOutcome, undone)
	}
	// A copy of the acquire, sent while the WAIT went unanswered, may land
	// after that release and grant the holder again; the caller, told the
	// store is unavailable, gives up on its grants, as a supervisor does,
	// and nothing of the request is left holding the job.
	if _, err := plain.RecordLate(redisCall(t, storetest.HangGuard), leasestore.LateOutcome{Job: "other", Holder: "w2",
		Outcome: leasestore.Outcome{Result: leasestore.ResultNotStarted, ExitCode: -1, Reason: "gave up"}}); err != nil {
		t.Fatal(err)
	}
	if st := storetest.Status(t, plain, "other"); st.State != leasestore.StateIdle {
		t.Errorf("after the caller gave up on an unreplicated grant: state %s, want IDLE", st.State)
	}
}

func TestMinReplicasWithoutReplicasRefuses(t *testing.T) {
	s := openRedis(t, ownRedis(t).URL+"?min_replicas=1", "ns")
	_, err := s.Acquire(redisCall(t, time.Second), storetest.Request("job", "w1", storetest.LongTTL))
	if !strings.Contains(fmtErr(err), "reached 0 of 1 replica(s)") {
		t.Fatalf("Acquire on a primary without replicas = %v, want it to say 0 of 1 replica", err)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
