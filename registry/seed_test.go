package registry

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/redisstore"
	"github.com/leasectl/leasectl/registry/api"
)

// testRedis is the package's redis-server.
var testRedis = testserver.Share("test redis-server", redistest.Start, redistest.Options{})

func TestMain(m *testing.M) { os.Exit(testserver.Run(m, testRedis)) }

// realStores are the stores the seed's scenarios run against, each fresh.
func realStores(t *testing.T) map[string]func(t *testing.T) leasestore.Driver {
	return map[string]func(t *testing.T) leasestore.Driver{
		"embedded": func(t *testing.T) leasestore.Driver {
			s, err := filestore.Open(t.TempDir(), testNamespace)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func(t *testing.T) leasestore.Driver {
			srv := testRedis.Get(t)
			if _, err := srv.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			s, err := redisstore.Open(srv.URL, testNamespace)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
}

// Seed 002, Duplicate Prevention: worker-7 acquires the job, worker-9
// attempts the same job and is rejected ("Job owned by worker-7"): one
// execution.
func TestSeedDuplicatePrevention(t *testing.T) {
	for name, open := range realStores(t) {
		t.Run(name, func(t *testing.T) {
			srv := newTestServer(t, open(t), nil)
			acq := api.AcquireRequest{JobID: "video_encode_12345", WorkerID: "worker-7", Region: "us-east-1"}
			var l api.Lease
			request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acq).decode(t, &l)
			if l.FencingToken <= 0 || l.Attempt != 1 || !l.LeaseExpiry.After(l.GrantedAt) {
				t.Errorf("worker-7's lease %+v", l)
			}

			acq.WorkerID = "worker-9"
			e := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acq).err(t)
			if e.Code != api.CodeHeld || e.Holder == nil || e.Holder.WorkerID != "worker-7" ||
				e.Holder.FencingToken != l.FencingToken || !strings.Contains(e.Message, "worker-7") {
				t.Fatalf("worker-9's attempt: %+v, want held by worker-7", e)
			}

			var st api.JobStatus
			request(t, srv.url, http.MethodGet, api.PathStatus+"video_encode_12345", readerToken, nil).decode(t, &st)
			if st.State != "RUNNING" || st.Owner != "worker-7" || st.FencingToken != l.FencingToken || st.Attempt != 1 ||
				st.Region != "us-east-1" || st.LeaseExpiry == nil {
				t.Errorf("status %+v, want RUNNING, owned by worker-7 with token %d, attempt 1, region us-east-1", st, l.FencingToken)
			}
		})
	}
}

// Seed 002, Crash Failover: worker-7 acquires, crashes, its lease expires;
// worker-9 acquires with a higher token; worker-7 recovers and submits with
// its old token: rejected as stale; worker-9 completes with its own:
// accepted.
func TestSeedCrashFailover(t *testing.T) {
	const ttl = 200 * time.Millisecond
	for name, open := range realStores(t) {
		t.Run(name, func(t *testing.T) {
			srv := newTestServer(t, open(t), nil)
			var old api.Lease
			request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("video_encode_12345", "worker-7", ttl)).decode(t, &old)
			time.Sleep(ttl + 300*time.Millisecond) // worker-7 crashed: no heartbeat comes

			var cur api.Lease
			request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("video_encode_12345", "worker-9", time.Minute)).decode(t, &cur)
			if cur.FencingToken <= old.FencingToken || cur.Attempt != 2 {
				t.Fatalf("worker-9's lease %+v after worker-7's token %d, want a higher token, attempt 2", cur, old.FencingToken)
			}
			if cur.Recovered == nil || cur.Recovered.WorkerID != "worker-7" || cur.Recovered.FencingToken != old.FencingToken {
				t.Errorf("worker-9's grant recovered %+v, want worker-7's crash", cur.Recovered)
			}

			// worker-7 recovers: its heartbeat, completion and token are stale.
			hb := api.HeartbeatRequest{JobID: "video_encode_12345", WorkerID: "worker-7", FencingToken: old.FencingToken, TTLMS: api.MS(ttl)}
			if e := request(t, srv.url, http.MethodPost, api.PathHeartbeat, workerToken, hb).err(t); e.Code != api.CodeLeaseLost {
				t.Errorf("worker-7's heartbeat: %+v, want lease_lost", e)
			}
			done := api.CompleteRequest{JobID: "video_encode_12345", WorkerID: "worker-7", FencingToken: old.FencingToken, Result: "stale output"}
			if e := request(t, srv.url, http.MethodPost, api.PathComplete, workerToken, done).err(t); e.Code != api.CodeLeaseLost {
				t.Errorf("worker-7's completion with token %d: %+v, want rejected as stale (lease_lost)", old.FencingToken, e)
			}
			check := api.PathCheckToken + "?job_id=video_encode_12345&fencing_token=" + strconv.FormatInt(old.FencingToken, 10)
			if e := request(t, srv.url, http.MethodGet, check, readerToken, nil).err(t); e.Code != api.CodeStaleToken ||
				e.CurrentToken == nil || *e.CurrentToken != cur.FencingToken || e.Live == nil || !*e.Live {
				t.Errorf("check of worker-7's token: %+v, want stale with current token %d live", e, cur.FencingToken)
			}

			// worker-9 heartbeats and completes with its own token: accepted.
			hb = api.HeartbeatRequest{JobID: "video_encode_12345", WorkerID: "worker-9", FencingToken: cur.FencingToken, TTLMS: 60_000}
			var beat api.Heartbeat
			request(t, srv.url, http.MethodPost, api.PathHeartbeat, workerToken, hb).decode(t, &beat)
			if !beat.NewLeaseExpiry.After(cur.GrantedAt) {
				t.Errorf("heartbeat's new expiry %s, not after the grant %s", beat.NewLeaseExpiry, cur.GrantedAt)
			}
			done = api.CompleteRequest{JobID: "video_encode_12345", WorkerID: "worker-9", FencingToken: cur.FencingToken, Result: "s3://out/12345.mp4", DurationMS: 1500}
			var ok api.Success
			request(t, srv.url, http.MethodPost, api.PathComplete, workerToken, done).decode(t, &ok)
			if !ok.Success {
				t.Error("worker-9's completion was not a success")
			}

			var st api.JobStatus
			request(t, srv.url, http.MethodGet, api.PathStatus+"video_encode_12345", readerToken, nil).decode(t, &st)
			if st.State != "COMPLETED" || st.Owner != "" || st.LastOutcome == nil || st.LastOutcome.FencingToken != cur.FencingToken ||
				!strings.Contains(st.LastOutcome.Reason, "s3://out/12345.mp4") || st.Crashes != 0 {
				t.Errorf("status after completion %+v (outcome %+v), want COMPLETED by token %d with its result", st, st.LastOutcome, cur.FencingToken)
			}
		})
	}
}

// Seed 002's release (back to PENDING), region and ttl_deadline, through
// HTTP.
func TestSeedReleaseRegionDeadline(t *testing.T) {
	for name, open := range realStores(t) {
		t.Run(name, func(t *testing.T) {
			srv := newTestServer(t, open(t), nil)
			acq := api.AcquireRequest{JobID: "etl", WorkerID: "w1", Region: "eu-west-1"}
			var l api.Lease
			request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acq).decode(t, &l)
			rel := api.ReleaseRequest{JobID: "etl", WorkerID: "w1", FencingToken: l.FencingToken, Reason: "input not ready", ExitCode: 2}
			var ok api.Success
			request(t, srv.url, http.MethodPost, api.PathRelease, workerToken, rel).decode(t, &ok)
			var st api.JobStatus
			request(t, srv.url, http.MethodGet, api.PathStatus+"etl", readerToken, nil).decode(t, &st)
			if st.State != "PENDING" || st.LastOutcome == nil || st.LastOutcome.Result != "failed" || st.Attempt != 1 {
				t.Errorf("after a release: %+v, want PENDING after a failed attempt 1", st)
			}

			acq.WorkerID, acq.Region = "w2", "us-east-1"
			e := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acq).err(t)
			if e.Code != api.CodeRegionMismatch || e.Region != "eu-west-1" || e.RequestedRegion != "us-east-1" {
				t.Errorf("a worker of another region: %+v", e)
			}

			past := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
			acq.Region, acq.TTLDeadline = "eu-west-1", &past
			e = request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acq).err(t)
			if e.Code != api.CodeDeadlinePassed || e.TTLDeadline == nil || !e.TTLDeadline.Equal(past) || e.Now == nil || !e.Now.After(past) {
				t.Errorf("an acquire past its ttl_deadline: %+v", e)
			}
			future := time.Now().Add(time.Hour).UTC()
			acq.TTLDeadline = &future
			request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acq).decode(t, &l)
			if l.Attempt != 2 || l.TTLDeadline == nil || !l.TTLDeadline.Equal(future) || l.Region != "eu-west-1" {
				t.Errorf("an acquire before its ttl_deadline: %+v, want attempt 2 echoing the deadline", l)
			}
		})
	}
}
