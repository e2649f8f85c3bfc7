package registry

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/registry/api"
)

// inTime is the admission of a request by its sender's deadline: it
// stamps every answer with the registry's clock (api.HeaderClock), and
// refuses, without running it, a request whose api.HeaderDeadline on that
// clock has passed: its sender no longer waits for the answer, which
// could only do harm (a grant nobody runs; a renewal or a release the
// sender already retried elsewhere).
//
// The clock is this process's monotonic one, read from its start: the
// contract assumes that clocks advance at about the same rate, not that
// they agree (docs/design.md §2), so the client never sends its own
// time. It converts the time it has left into this clock through the
// last reading it got from this process, counting the reading as taken
// at that request's send time, the earliest it can have been taken;
// the deadline it sends is therefore never earlier than the true one,
// and a refusal means the sender's deadline has passed (up to the rate
// allowance the client adds). A reading of another process (a restart)
// does not match the instance, and the request is run.
type inTime struct {
	instance string
	start    time.Time
	now      func() time.Time
	log      zerolog.Logger
	next     http.Handler
}

func newInTime(now func() time.Time, log zerolog.Logger, next http.Handler) *inTime {
	return &inTime{instance: newID(), start: now(), now: now, log: log, next: next}
}

func (t *inTime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := api.Clock{Instance: t.instance, Micros: t.now().Sub(t.start).Microseconds()}
	w.Header().Set(api.HeaderClock, now.String())
	if d, ok := api.ParseClock(r.Header.Get(api.HeaderDeadline)); ok && d.Instance == t.instance && now.Micros > d.Micros {
		late := time.Duration(now.Micros-d.Micros) * time.Microsecond
		e := api.Errorf(api.CodeRequestExpired, "the request arrived %s after its sender's deadline; it was not run", late)
		t.log.Warn().Str("method", r.Method).Str("path", r.URL.Path).Str("remote", r.RemoteAddr).Dur("late_by", late).
			Int("status", e.Status()).Str("code", e.Code).Msg("request")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(e.Status())
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: e})
		return
	}
	t.next.ServeHTTP(w, r)
}
