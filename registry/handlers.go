package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// The operations. Each decodes and validates its request (a *FieldError
// names the field at fault), makes one store call bounded by x.ctx, and
// returns the status and body of its answer, or the error the answer
// stands for.

func (s *Server) acquire(x *exchange) (int, any, error) {
	var a api.AcquireRequest
	if err := x.decode(&a); err != nil {
		return 0, nil, err
	}
	x.job, x.worker = a.JobID, a.WorkerID
	req, err := a.ToStore()
	if err != nil {
		return 0, nil, err
	}
	if err := s.checkLimits(req.TTL, req.Slots); err != nil {
		return 0, nil, err
	}
	l, err := s.cfg.Store.Acquire(x.ctx, req)
	if err != nil {
		return 0, nil, err
	}
	x.token = l.Token
	return http.StatusOK, api.FromLease(l, req), nil
}

func (s *Server) heartbeat(x *exchange) (int, any, error) {
	var h api.HeartbeatRequest
	if err := x.decode(&h); err != nil {
		return 0, nil, err
	}
	x.job, x.worker, x.token = h.JobID, h.WorkerID, h.FencingToken
	l, err := h.Validate()
	if err != nil {
		return 0, nil, err
	}
	if err := s.checkLimits(l.TTL, 0); err != nil {
		return 0, nil, err
	}
	sent := s.cfg.Clock.Now()
	if err := s.cfg.Store.Renew(x.ctx, l); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Heartbeat{NewLeaseExpiry: sent.Add(l.TTL).UTC(), TTLMS: h.TTLMS, Stop: api.FromStop(l.Stop)}, nil
}

// checkLimits refuses a TTL the store behind would round or refuse (a
// store that declares its range in its Limits: etcd's), naming the range,
// and more slots than it grants a job (0: one), as run refuses them on a
// store it reaches itself.
func (s *Server) checkLimits(ttl time.Duration, slots int) error {
	lim := s.cfg.Store.Limits()
	var le *leasestore.LimitError
	switch {
	case !errors.As(lim.Check(ttl, slots), &le):
		return nil
	case le.TTLLimit():
		return &api.FieldError{Field: "ttl_ms", Reason: fmt.Sprintf("%s is outside the lease TTLs the store behind the registry honours, %s to %s", ttl, lim.MinTTL, lim.MaxTTL)}
	}
	return &api.FieldError{Field: "slots", Reason: fmt.Sprintf("%d is more than the %d the store behind the registry runs per job", slots, lim.Slots())}
}

// leave takes a waiting worker out of its job's queue.
func (s *Server) leave(x *exchange) (int, any, error) {
	var a api.LeaveRequest
	if err := x.decode(&a); err != nil {
		return 0, nil, err
	}
	job, worker, err := a.Validate()
	x.job, x.worker = job, worker
	if err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.Leave(x.ctx, job, worker); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Success{Success: true}, nil
}

func (s *Server) complete(x *exchange) (int, any, error) {
	var c api.CompleteRequest
	if err := x.decode(&c); err != nil {
		return 0, nil, err
	}
	x.job, x.worker, x.token = c.JobID, c.WorkerID, c.FencingToken
	l, out, err := c.Validate()
	if err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.Release(x.ctx, l, out); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Success{Success: true}, nil
}

func (s *Server) release(x *exchange) (int, any, error) {
	var rr api.ReleaseRequest
	if err := x.decode(&rr); err != nil {
		return 0, nil, err
	}
	x.job, x.worker, x.token = rr.JobID, rr.WorkerID, rr.FencingToken
	l, out, err := rr.Validate()
	if err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.Release(x.ctx, l, out); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Success{Success: true}, nil
}

// recordLate takes the outcome of a run that did not reach the store in
// time (its release failed until its supervisor gave up, or its grant's
// answer never reached it): one call of the store's RecordLate. A second
// delivery changes nothing in the store (RecordLate is idempotent) and
// answers an empty correction; with the same Idempotency-Key, it gets the
// first answer instead.
func (s *Server) recordLate(x *exchange) (int, any, error) {
	var rl api.RecordLateRequest
	if err := x.decode(&rl); err != nil {
		return 0, nil, err
	}
	x.job, x.worker, x.token = rl.JobID, rl.WorkerID, rl.FencingToken
	late, err := rl.Validate()
	if err != nil {
		return 0, nil, err
	}
	c, err := s.cfg.Store.RecordLate(x.ctx, late)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.FromCorrection(c), nil
}

func (s *Server) status(x *exchange) (int, any, error) {
	x.job = x.r.PathValue("job_id")
	if err := leasestore.ValidateJobID(x.job); err != nil {
		return 0, nil, &api.FieldError{Field: "job_id", Reason: err.Error()}
	}
	st, err := s.cfg.Store.Status(x.ctx, x.job)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.FromStatus(st), nil
}

func (s *Server) subscribe(x *exchange) (int, any, error) {
	var sr api.SubscribeRequest
	if err := x.decode(&sr); err != nil {
		return 0, nil, err
	}
	job, err := sr.Validate()
	x.job = job
	if err != nil {
		return 0, nil, err
	}
	sub, err := s.hub.subscribe(x.ctx, job, sr.WorkerID, x.digest)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, api.Subscription{SubscriptionID: sub.id, JobID: job, IdleTimeoutMS: api.MS(subscriptionIdle)}, nil
}

// wait is the long-poll: it holds the request until the subscription's job
// is released or the timeout the client asked for passes. Its bound is the
// client's timeout, not the store call's.
func (s *Server) wait(x *exchange) (int, any, error) {
	timeout, err := pollTimeout(x.r.URL.Query().Get("timeout_ms"))
	if err != nil {
		return 0, nil, err
	}
	sub, err := s.subscription(x)
	if err != nil {
		return 0, nil, err
	}
	released, err := s.hub.wait(x.r.Context(), sub, timeout, s.draining)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Wait{Released: released}, nil
}

// pollTimeout is a long-poll's ?timeout_ms=: api.DefaultPollTimeoutMS when
// empty, never more than api.MaxPollTimeoutMS.
func pollTimeout(v string) (time.Duration, error) {
	if v == "" {
		return api.Duration(api.DefaultPollTimeoutMS), nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return 0, &api.FieldError{Field: "timeout_ms", Reason: "it must be a positive number of milliseconds"}
	}
	return api.Duration(min(ms, api.MaxPollTimeoutMS)), nil
}

func (s *Server) unsubscribe(x *exchange) (int, any, error) {
	sub, err := s.subscription(x)
	if err != nil {
		return 0, nil, err
	}
	s.hub.drop(sub)
	return http.StatusNoContent, nil, nil
}

// subscription is the request's subscription, if it is the token's.
func (s *Server) subscription(x *exchange) (*subscription, error) {
	id := x.r.PathValue("subscription_id")
	sub := s.hub.get(id, x.digest)
	if sub == nil {
		return nil, api.Errorf(api.CodeSubscriptionNotFound,
			"no subscription %q for this token: it expired, the registry restarted, or it is another token's; subscribe again", id)
	}
	x.job = sub.job
	return sub, nil
}

func (s *Server) watchTokens(x *exchange) (int, any, error) {
	var wr api.TokenWatchRequest
	if err := x.decode(&wr); err != nil {
		return 0, nil, err
	}
	job, err := wr.Validate()
	x.job = job
	if err != nil {
		return 0, nil, err
	}
	w, states, err := s.watches.watch(x.ctx, job, x.digest)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, api.TokenWatch{WatchID: w.id, JobID: job, IdleTimeoutMS: api.MS(tokenWatchIdle), States: states}, nil
}

// tokenStates is the token watch's long-poll: it acknowledges the states up
// to ?after= and holds the request until there are states after it, or the
// timeout the client asked for passes. Its bound is the client's timeout,
// not the store call's.
func (s *Server) tokenStates(x *exchange) (int, any, error) {
	q := x.r.URL.Query()
	timeout, err := pollTimeout(q.Get("timeout_ms"))
	if err != nil {
		return 0, nil, err
	}
	after, err := strconv.ParseInt(q.Get("after"), 10, 64)
	if err != nil || after < 0 {
		return 0, nil, &api.FieldError{Field: "after", Reason: "it must be the seq of the last state collected (0 for none)"}
	}
	w, err := s.tokenWatch(x)
	if err != nil {
		return 0, nil, err
	}
	states, err := s.watches.poll(x.r.Context(), w, after, timeout, s.draining)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.TokenStates{States: states}, nil
}

func (s *Server) unwatchTokens(x *exchange) (int, any, error) {
	w, err := s.tokenWatch(x)
	if err != nil {
		return 0, nil, err
	}
	s.watches.drop(w)
	return http.StatusNoContent, nil, nil
}

// tokenWatch is the request's token watch, if it is the token's.
func (s *Server) tokenWatch(x *exchange) (*tokenWatch, error) {
	id := x.r.PathValue("watch_id")
	w := s.watches.get(id, x.digest)
	if w == nil {
		return nil, errGone(id)
	}
	x.job = w.job
	return w, nil
}

// syncTokens is the token feed's heartbeat: the store's, then the seq
// each of the caller's watches has reached.
func (s *Server) syncTokens(x *exchange) (int, any, error) {
	var sr api.TokenSyncRequest
	if err := x.decode(&sr); err != nil {
		return 0, nil, err
	}
	if err := sr.Validate(); err != nil {
		return 0, nil, err
	}
	out, err := s.watches.sync(x.ctx, sr.WatchIDs, x.digest)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

func (s *Server) scan(x *exchange) (int, any, error) {
	crashes, err := s.cfg.Store.Scan(x.ctx)
	for _, c := range crashes {
		s.changed(c.Job)
	}
	if err != nil {
		if len(crashes) > 0 {
			// Counted crashes are consumed: they must reach the caller.
			s.cfg.Log.Warn().Err(err).Int("crashes", len(crashes)).Msg("scan failed after counting crashes; answering with those")
			return http.StatusOK, api.ScanResult{Crashes: api.FromCrashes(crashes)}, nil
		}
		return 0, nil, err
	}
	return http.StatusOK, api.ScanResult{Crashes: api.FromCrashes(crashes)}, nil
}

func (s *Server) quarantine(x *exchange) (int, any, error) {
	return s.note(x, s.cfg.Store.Quarantine)
}

func (s *Server) unquarantine(x *exchange) (int, any, error) {
	return s.note(x, s.cfg.Store.ReleaseQuarantine)
}

func (s *Server) stop(x *exchange) (int, any, error) {
	return s.note(x, s.cfg.Store.Stop)
}

// note runs an operator's action on a job with who and why.
func (s *Server) note(x *exchange, act func(ctx context.Context, job string, note leasestore.Note) error) (int, any, error) {
	var n api.NoteRequest
	if err := x.decode(&n); err != nil {
		return 0, nil, err
	}
	job, note, err := n.Validate()
	x.job, x.worker = job, note.By
	if err != nil {
		return 0, nil, err
	}
	if err := act(x.ctx, job, note); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Success{Success: true}, nil
}

func (s *Server) jobs(x *exchange) (int, any, error) {
	q := x.r.URL.Query()
	prefix := q.Get("prefix")
	if prefix != "" {
		if err := leasestore.ValidateJobID(prefix); err != nil {
			return 0, nil, &api.FieldError{Field: "prefix", Reason: "it is no start of a job ID: " + err.Error()}
		}
	}
	limit := api.MaxJobsListed
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > api.MaxJobsListed {
			return 0, nil, &api.FieldError{Field: "limit", Reason: fmt.Sprintf("it must be an integer from 1 to %d", api.MaxJobsListed)}
		}
		limit = n
	}
	jobs, err := s.cfg.Store.Jobs(x.ctx, prefix, limit)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.JobIDs{Jobs: append(make([]string, 0, len(jobs)), jobs...)}, nil
}

func (s *Server) quarantined(x *exchange) (int, any, error) {
	list, err := s.cfg.Store.Quarantined(x.ctx)
	if err != nil {
		return 0, nil, err
	}
	out := api.QuarantinedJobs{Jobs: make([]api.Quarantine, 0, len(list))}
	for _, q := range list {
		out.Jobs = append(out.Jobs, api.FromQuarantine(q))
	}
	return http.StatusOK, out, nil
}

func (s *Server) leases(x *exchange) (int, any, error) {
	list, err := s.cfg.Store.Leases(x.ctx)
	if err != nil {
		return 0, nil, err
	}
	out := api.Leases{Leases: make([]api.Holder, 0, len(list))}
	for _, h := range list {
		out.Leases = append(out.Leases, api.FromHolder(h))
	}
	return http.StatusOK, out, nil
}

func (s *Server) counts(x *exchange) (int, any, error) {
	c, err := s.cfg.Store.Counts(x.ctx)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.Counts{InFlight: c.InFlight, Quarantined: c.Quarantined}, nil
}

func (s *Server) checkToken(x *exchange) (int, any, error) {
	q := x.r.URL.Query()
	x.job = q.Get("job_id")
	if err := leasestore.ValidateJobID(x.job); err != nil {
		return 0, nil, &api.FieldError{Field: "job_id", Reason: err.Error()}
	}
	token, err := strconv.ParseInt(q.Get("fencing_token"), 10, 64)
	if err != nil || token <= 0 {
		return 0, nil, &api.FieldError{Field: "fencing_token", Reason: "it must be a positive integer"}
	}
	x.token = token
	if err := s.cfg.Store.CheckToken(x.ctx, x.job, token); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.TokenCheck{JobID: x.job, FencingToken: token, Valid: true, CurrentToken: token, Live: true}, nil
}

// metricsContentType is the media type of the text exposition format.
const metricsContentType = "text/plain; version=0.0.4; charset=utf-8"

// serveMetrics writes the reaper's metrics (with --reap-interval) and the
// registry's own, in the text format.
func (s *Server) serveMetrics(*exchange) (int, any, error) {
	var b bytes.Buffer
	if s.cfg.ReaperMetrics != nil {
		if err := s.cfg.ReaperMetrics.WriteText(&b); err != nil {
			return 0, nil, err
		}
	}
	if err := s.metrics.writeText(&b, s.hub.count(), s.watches.count()); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, rawBody{contentType: metricsContentType, data: b.Bytes()}, nil
}

// health answers 200 while the registry serves, 503 once it drains for a
// shutdown. It does not ask the store: a load balancer should not take
// every registry out because the store they share failed.
func (s *Server) health(*exchange) (int, any, error) {
	select {
	case <-s.draining:
		return 0, nil, api.Errorf(api.CodeShuttingDown, "the registry is shutting down")
	default:
		return http.StatusOK, rawBody{contentType: "text/plain; charset=utf-8", data: []byte("ok\n")}, nil
	}
}
