package fence

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

// serve sends a request with the given headers through c's middleware to a
// handler that records that it ran, and returns the response and whether
// the handler ran.
func serve(t *testing.T, c *Checker, headers map[string]string) (*httptest.ResponseRecorder, bool) {
	t.Helper()
	ran := false
	h := c.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran = true
		w.WriteHeader(http.StatusNoContent)
	}))
	req := httptest.NewRequest(http.MethodPut, "/reports/nightly", strings.NewReader("body"))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec, ran
}

// refusal decodes a refusal body, checking its status and content type.
func refusal(t *testing.T, rec *httptest.ResponseRecorder, status int) Refusal {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var r Refusal
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("body %q is not a refusal: %v", rec.Body, err)
	}
	return r
}

func headers(job string, token int64) map[string]string {
	return map[string]string{HeaderJob: job, HeaderToken: fmt.Sprint(token)}
}

func TestMiddleware(t *testing.T) {
	s := newFakeStore()
	c, _ := checker(t, s, Options{Pattern: BoundedStaleness})
	old := s.grant("nightly")
	cur := s.grant("nightly")

	t.Run("current token reaches the handler", func(t *testing.T) {
		rec, ran := serve(t, c, headers("nightly", cur))
		if !ran || rec.Code != http.StatusNoContent {
			t.Fatalf("status %d, handler ran %v; want the handler's 204", rec.Code, ran)
		}
	})

	t.Run("stale token is a 409", func(t *testing.T) {
		rec, ran := serve(t, c, headers("nightly", old))
		if ran {
			t.Error("the handler ran for a stale token")
		}
		r := refusal(t, rec, http.StatusConflict)
		want := Refusal{Error: "stale_token", Job: "nightly", Token: old, NewestToken: cur, Live: true}
		if r.Message == "" || r.Error != want.Error || r.Job != want.Job || r.Token != want.Token ||
			r.NewestToken != want.NewestToken || r.Live != want.Live {
			t.Errorf("refusal %+v, want %+v with a message", r, want)
		}
	})

	for name, h := range map[string]map[string]string{
		"no headers":       {},
		"no token":         {HeaderJob: "nightly"},
		"token not number": {HeaderJob: "nightly", HeaderToken: "abc"},
		"invalid job":      headers("bad job", cur),
		"zero token":       headers("nightly", 0),
	} {
		t.Run(name+" is a 400", func(t *testing.T) {
			rec, ran := serve(t, c, h)
			if ran {
				t.Error("the handler ran")
			}
			if r := refusal(t, rec, http.StatusBadRequest); r.Error != "bad_request" || r.Message == "" {
				t.Errorf("refusal %+v, want bad_request with a message", r)
			}
		})
	}

	t.Run("store down is a 503", func(t *testing.T) {
		s.mu.Lock()
		s.down = &leasestore.UnavailableError{Op: "check token", Err: errors.New("dial tcp 10.0.0.7:6379: connection refused")}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.down = nil
			s.mu.Unlock()
		}()
		rec, ran := serve(t, c, headers("other", 5))
		if ran {
			t.Error("the handler ran")
		}
		r := refusal(t, rec, http.StatusServiceUnavailable)
		if r.Error != "unavailable" || rec.Header().Get("Retry-After") == "" || strings.Contains(r.Message, "10.0.0.7") {
			t.Errorf("refusal %+v, Retry-After %q: want unavailable, a Retry-After, and no store address", r, rec.Header().Get("Retry-After"))
		}
	})
}
