package httpstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/leasectl/leasectl/registry/api"
)

// reply is a registry's answer to one request.
type reply struct {
	status int
	data   []byte
}

// busyError is an answer that says the registry cannot serve the request
// now (it is stopping, its store failed, or a proxy in front of it found
// no registry): the request goes to the next registry, and the answer is
// the call's if every registry gives one like it.
type busyError struct{ reply *reply }

func (e *busyError) Error() string { return fmt.Sprintf("answered %d", e.reply.status) }

// tryElsewhere reports whether a request that failed with err goes to the
// next registry: a connection that failed or broke, no answer in time, or
// a registry too busy to serve it.
func tryElsewhere(error) bool { return true }

// send sends c, with body, to the registry at base, and returns its answer;
// a 502, 503 or 504 is a *busyError, and so is a refusal of the request as
// expired (a registry's clock read too long ago: the next one may take it).
func (s *Store) send(ctx context.Context, base string, c call, body []byte) (*reply, error) {
	target := base + c.path
	if len(c.query) > 0 {
		target += "?" + c.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, target, rd)
	if err != nil {
		return nil, err
	}
	h := req.Header
	h.Set("Accept", "application/json")
	if c.body != nil {
		h.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		h.Set("Authorization", "Bearer "+s.token)
	}
	h.Set(api.HeaderNamespace, s.namespace)
	sent := time.Now()
	if deadline, ok := ctx.Deadline(); ok {
		h.Set(api.HeaderTimeout, strconv.FormatInt(max(deadline.Sub(sent).Milliseconds(), 1), 10))
		if d, ok := s.clocks.deadline(base, deadline); ok {
			h.Set(api.HeaderDeadline, d.String())
		}
	}
	if c.key != "" {
		h.Set(api.HeaderIdempotencyKey, c.key)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is named by the caller, once
		}
		return nil, err
	}
	defer resp.Body.Close()
	if now, ok := api.ParseClock(resp.Header.Get(api.HeaderClock)); ok {
		s.clocks.read(base, now, sent)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	r := &reply{status: resp.StatusCode, data: data}
	switch r.status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return nil, &busyError{r}
	}
	return r, nil
}

// clocks keeps the last clock reading of each registry, and when the
// request that brought it was sent.
type clocks struct {
	mu   sync.Mutex
	last map[string]clockReading
}

type clockReading struct {
	clock api.Clock
	sent  time.Time // with the monotonic reading: only durations are taken
}

// driftShare is the rate allowance: a deadline converted through a reading
// taken d ago is sent d/driftShare later (0.1 %, ten times what a clock
// without NTP drifts), so that a registry whose clock runs a little fast
// does not refuse a request whose sender still waits for it.
const driftShare = 1000

// read keeps now, read from base by a request sent at sent.
func (c *clocks) read(base string, now api.Clock, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]clockReading{}
	}
	c.last[base] = clockReading{clock: now, sent: sent}
}

// deadline converts deadline, on this host's clock, into base's clock. The
// registry read its clock after the request that brought the reading was
// sent, so counting the reading as taken at the send time gives a time on
// its clock no earlier than deadline's. false without a reading.
func (c *clocks) deadline(base string, deadline time.Time) (api.Clock, bool) {
	c.mu.Lock()
	r, ok := c.last[base]
	c.mu.Unlock()
	if !ok {
		return api.Clock{}, false
	}
	d := deadline.Sub(r.sent)
	d += d / driftShare
	return api.Clock{Instance: r.clock.Instance, Micros: r.clock.Micros + d.Microseconds()}, true
}
