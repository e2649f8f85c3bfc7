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
