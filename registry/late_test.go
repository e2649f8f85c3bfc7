package registry

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// RecordLate counts the call, applies its fault and records the outcome in
// the embedded store.
func (f *fakeStore) RecordLate(ctx context.Context, late leasestore.LateOutcome) (leasestore.Correction, error) {
	if err := f.enter(ctx, "record-late"); err != nil {
		return leasestore.Correction{}, err
	}
	return f.Driver.RecordLate(ctx, late)
}

// A worker's late outcome is one call of the store's RecordLate, answered
// with what it corrected; a second delivery changes nothing, and with the
// same Idempotency-Key gets the first answer without a store call. A
// reader may not deliver one.
func TestRecordLate(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	var l api.Lease
	request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute)).decode(t, &l)
	late := api.RecordLateRequest{JobID: "j", WorkerID: "w", FencingToken: l.FencingToken, Result: "failed", ExitCode: 3, DurationMS: 1500}

	if e := request(t, srv.url, http.MethodPost, api.PathRecordLate, readerToken, late).err(t); e.Code != api.CodeForbidden || e.RequiredRole != "worker" {
		t.Errorf("a reader's late outcome: %+v, want forbidden, worker required", e)
	}
	var c api.Correction
	first := request(t, srv.url, http.MethodPost, api.PathRecordLate, workerToken, late, api.HeaderIdempotencyKey, "k")
	first.decode(t, &c)
	if !c.Released || c.CrashWithdrawn || c.Crashes != 0 || store.count("record-late") != 1 {
		t.Errorf("late outcome of a live run: %+v after %d store calls; want it released by one call", c, store.count("record-late"))
	}
	replayed := request(t, srv.url, http.MethodPost, api.PathRecordLate, workerToken, late, api.HeaderIdempotencyKey, "k")
	if replayed.header.Get("Idempotent-Replayed") != "true" || string(replayed.body) != string(first.body) || store.count("record-late") != 1 {
		t.Errorf("the same key again: %s (replayed %q), %d store calls; want the first answer, no call",
			replayed.body, replayed.header.Get("Idempotent-Replayed"), store.count("record-late"))
	}
	var again api.Correction
	request(t, srv.url, http.MethodPost, api.PathRecordLate, workerToken, late).decode(t, &again)
	if again.Released || again.CrashWithdrawn || again.QuarantineLifted || store.count("record-late") != 2 {
		t.Errorf("a second delivery without a key: %+v, want nothing changed", again)
	}
	st, err := store.Status(context.Background(), "j")
	if err != nil || st.LastOutcome == nil || st.LastOutcome.Token != l.FencingToken || st.LastOutcome.ExitCode != 3 {
		t.Errorf("status after the late outcome: %+v, %v; want its outcome recorded", st, err)
	}

	// A holder that never learned its token gives up on the grant.
	var gaveUp api.Correction
	request(t, srv.url, http.MethodPost, api.PathRecordLate, workerToken,
		api.RecordLateRequest{JobID: "never", WorkerID: "ghost", Result: "not-started"}).decode(t, &gaveUp)
	if e := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("never", "ghost", time.Minute)).err(t); e.Code != api.CodeLeaseLost {
		t.Errorf("an acquire by a holder that gave up: %+v, want lease_lost", e)
	}

	for _, bad := range []struct {
		req   api.RecordLateRequest
		field string
	}{
		{api.RecordLateRequest{WorkerID: "w"}, "job_id"},
		{api.RecordLateRequest{JobID: "j"}, "worker_id"},
		{api.RecordLateRequest{JobID: "j", WorkerID: "w", FencingToken: -1}, "fencing_token"},
		{api.RecordLateRequest{JobID: "j", WorkerID: "w", Result: "gone"}, "result"},
	} {
		if e := request(t, srv.url, http.MethodPost, api.PathRecordLate, workerToken, bad.req).err(t); e.Code != api.CodeInvalidRequest || e.Field != bad.field {
			t.Errorf("%+v: %+v, want invalid %s", bad.req, e, bad.field)
		}
	}
}
