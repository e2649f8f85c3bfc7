package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// How the page follows changes. Jobs run through this registry change the
// page at once; runs that reach the store by other ways (a worker with
// the store's own URL, a lease that ran out) show within
// uiReconcileInterval, when the live leases are read again. A page that
// hears nothing, not even a ping, for a while says it lost contact.
const (
	uiPingInterval      = 10 * time.Second
	uiReconcileInterval = 5 * time.Second
	// uiFeedBuffer is how many changes a slow page may lag behind before
	// it is told to read everything again.
	uiFeedBuffer = 256
)

// uiFeed passes the names of jobs that changed to every page that
// follows them.
type uiFeed struct {
	mu   sync.Mutex
	subs map[*uiFollower]struct{}
}

// uiFollower is one page following changes.
type uiFollower struct {
	jobs     chan string
	overflow chan struct{} // receives when jobs was full: changes were lost
}

func newUIFeed() *uiFeed { return &uiFeed{subs: map[*uiFollower]struct{}{}} }

func (f *uiFeed) follow() *uiFollower {
	fl := &uiFollower{jobs: make(chan string, uiFeedBuffer), overflow: make(chan struct{}, 1)}
	f.mu.Lock()
	f.subs[fl] = struct{}{}
	f.mu.Unlock()
	return fl
}

func (f *uiFeed) unfollow(fl *uiFollower) {
	f.mu.Lock()
	delete(f.subs, fl)
	f.mu.Unlock()
}

func (f *uiFeed) publish(job string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for fl := range f.subs {
		select {
		case fl.jobs <- job:
		default:
			select {
			case fl.overflow <- struct{}{}:
			default:
			}
		}
	}
}

// changed tells the pages that job changed.
func (s *Server) changed(job string) {
	s.ui.feed.publish(job)
}

// changesJob reports whether a successful rt changes its job's record
// as the page shows it. A heartbeat only moves the expiry: the page would
// redraw every running job every few seconds for it.
func (rt route) changesJob() bool {
	switch rt.name {
	case "acquire-job", "complete-job", "release-job", "record-late", "quarantine-job", "unquarantine-job", "stop-job":
		return true
	}
	return false
}

// uiEvents streams server-sent events to a page: "job" with a jobRow when
// a job changed, "ping" every uiPingInterval, "resync" when the page
// lagged and must read everything again, "logout" when its session ended.
func (s *Server) uiEvents(p *uiRequest) {
	rc := http.NewResponseController(p.w)
	_ = rc.SetWriteDeadline(time.Time{}) // the stream outlives the server's write timeout
	p.w.Header().Set("Content-Type", "text/event-stream")
	p.w.WriteHeader(http.StatusOK)
	fl := s.ui.feed.follow()
	defer s.ui.feed.unfollow(fl)
	ping := s.cfg.Clock.NewTicker(uiPingInterval)
	defer ping.Stop()
	reconcile := s.cfg.Clock.NewTicker(s.ui.reconcile)
	defer reconcile.Stop()

	ctx := p.r.Context()
	live := s.liveTokens(ctx, nil)
	send := func(event string, data any) bool {
		b, _ := json.Marshal(data)
		_, err := fmt.Fprintf(p.w, "event: %s\ndata: %s\n\n", event, b)
		return err == nil && rc.Flush() == nil
	}
	select {
	case <-s.draining:
		// An empty stream: the page keeps retrying, as it should while
		// this registry shuts down and another (or it, restarted) comes.
		_ = rc.Flush()
		return
	default:
	}
	if !send("ping", uiTime(s.cfg.Clock.Now())) {
		return
	}
	for {
		var ok bool
		select {
		case <-ctx.Done():
			return
		case <-s.draining:
			return
		case job := <-fl.jobs:
			ok = s.sendRow(ctx, job, send)
		case <-fl.overflow:
			ok = send("resync", "")
		case <-ping.C():
			if se, _ := s.authenticate(p.r); se == nil {
				send("logout", "")
				return
			}
			ok = send("ping", uiTime(s.cfg.Clock.Now()))
		case <-reconcile.C():
			ok = true
			for _, job := range s.reconcile(ctx, &live) {
				if ok = s.sendRow(ctx, job, send); !ok {
					break
				}
			}
		}
		if !ok {
			return
		}
	}
}

// sendRow sends job's row as it is now; a job whose status cannot be read
// is left for the next change (a ping still tells the page it is heard).
func (s *Server) sendRow(ctx context.Context, job string, send func(string, any) bool) bool {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	st, err := s.cfg.Store.Status(ctx, job)
	if err != nil {
		s.cfg.Log.Debug().Err(err).Str("job", job).Msg("on-call page: reading a changed job failed")
		return true
	}
	return send("job", rowOf(st))
}

// liveTokens reads the live leases: job -> token. It returns prev when
// they cannot be read.
func (s *Server) liveTokens(ctx context.Context, prev map[string]int64) map[string]int64 {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	leases, err := s.cfg.Store.Leases(ctx)
	if err != nil {
		return prev
	}
	live := make(map[string]int64, len(leases))
	for _, h := range leases {
		live[h.Job] = h.Token
	}
	return live
}

// reconcile reads the live leases again and returns the jobs whose lease
// began or ended since *live, which it updates.
func (s *Server) reconcile(ctx context.Context, live *map[string]int64) []string {
	prev := *live
	now := s.liveTokens(ctx, prev)
	*live = now
	var out []string
	for job, token := range now {
		if prev[job] != token {
			out = append(out, job)
		}
	}
	for job := range prev {
		if _, ok := now[job]; !ok {
			out = append(out, job)
		}
	}
	return out
}
