package etcdstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/failover"
)

// client speaks etcd's v3 API as JSON over HTTP (the gRPC gateway every
// etcd member serves on its client port). A request that a member leaves
// unanswered past the hedge bound, or fails without an answer of etcd's
// own, goes to the next member as well (failover.Do), and the first answer
// counts. That is safe for every request the store makes, should the first
// copy land late too: reads; transactions guarded by the mod revisions of
// the keys they write, of which at most one copy commits, and a copy whose
// compare fails recognises the other's commit as its own (Store.landed), so
// the caller gets the answer of the write that happened; keep-alives of the caller's own etcd leases, which extend what
// they already hold; lease grants, whose spare lease holds no key and
// expires; the scan's mark, which a late copy can only move back, making
// the next scan look at more jobs, not fewer. A request refused for an
// expired auth token is sent again after authenticating (etcd did not
// apply it). Watches are not hedged: they move on only when a member
// refuses the connection, and start again from their revision when one
// breaks.
type client struct {
	endpoints *failover.Endpoints // base URLs, http:// or https://
	hc        *http.Client

	user, password string
	authMu         sync.Mutex
	token          string
}

// maxConnsPerEndpoint bounds the idle connections kept to one member. A
// supervisor makes one call at a time plus a watch; the reaper and the
// on-call commands run a few calls in parallel.
const maxConnsPerEndpoint = 8

// dialTimeout bounds a TCP connect to one member, so that a member that is
// down but whose host does not refuse (a dropped packet) leaves time for
// the next endpoint within the caller's deadline.
const dialTimeout = time.Second

func newClient(endpoints []string, tlsConf *tls.Config, user, password string) *client {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}
	return &client{
		endpoints: failover.New(endpoints, failover.DefaultNotes()),
		hc: &http.Client{Transport: &http.Transport{
			Proxy:               nil, // etcd members are reached directly, whatever HTTP_PROXY says
			DialContext:         d.DialContext,
			TLSClientConfig:     tlsConf,
			MaxIdleConnsPerHost: maxConnsPerEndpoint,
			DisableCompression:  true,
		}},
		user:     user,
		password: password,
	}
}

// etcdError is an error answer from etcd: its gRPC status code and message.
type etcdError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Err     string `json:"error"`
}

func (e *etcdError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	return e.Err
}

// gRPC status codes etcd answers with.
const (
	codeInvalidArgument  = 3
	codePermissionDenied = 7
	codeUnavailable      = 14
	codeUnauthenticated  = 16
)

// call posts in as JSON to path and decodes the answer into out.
func (c *client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	data, err := c.exchange(ctx, path, body)
	if err != nil || out == nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("unreadable answer from etcd: %w", err)
	}
	return nil
}

// exchange posts body to path and returns the whole answer, hedged over
// the members (see client). A streamed answer must end with the request,
// as a keep-alive's does.
func (c *client) exchange(ctx context.Context, path string, body []byte) ([]byte, error) {
	return failover.Do(ctx, c.endpoints, func(ctx context.Context, base string) ([]byte, error) {
		for reauth := 0; ; reauth++ {
			token, err := c.authToken(ctx)
			if err != nil {
				return nil, err
			}
			data, err := c.send(ctx, base+path, body, token)
			var e *etcdError
			if errors.As(err, &e) && e.Code == codeUnauthenticated && c.user != "" && reauth == 0 && strings.Contains(e.Message, "invalid auth token") {
				c.dropToken()
				continue
			}
			return data, err
		}
	}, tryElsewhere)
}

// send posts body to url with the auth token, if any, and returns the
// whole answer; an answer other than 200 OK is its *etcdError.
func (c *client) send(ctx context.Context, url string, body []byte, token string) ([]byte, error) {
	req, err := c.request(ctx, url, body, token)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, parseError(resp.StatusCode, data)
	}
	return data, nil
}

func (c *client) request(ctx context.Context, url string, body []byte, token string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	return req, nil
}

// tryElsewhere reports whether a request that failed with err goes to the
// next member: when the member gave no answer of etcd's own (the
// connection failed or broke, or the call's own context ended it) or said
// it cannot serve (no leader, no quorum).
func tryElsewhere(err error) bool {
	var e *etcdError
	if errors.As(err, &e) {
		return e.Code == codeUnavailable
	}
	return true
}

// stream posts body to path and returns the answer's body, which streams
// one JSON object per message, for the caller to close. It goes to the
// preferred member, moving on to the next one only when a member refuses
// the connection (nothing was sent): a watch is not hedged.
func (c *client) stream(ctx context.Context, path string, body []byte) (io.ReadCloser, error) {
	token, err := c.authToken(ctx)
	if err != nil {
		return nil, err
	}
	names := c.endpoints.Names()
	var lastErr error
	for _, n := range c.endpoints.Order() {
		req, err := c.request(ctx, names[n]+path, body, token)
		if err != nil {
			return nil, err
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			lastErr = err
			var op *net.OpError
			if !errors.As(err, &op) || op.Op != "dial" || ctx.Err() != nil {
				c.endpoints.Failed(n)
				return nil, err
			}
			continue
		}
		c.endpoints.Answered(n)
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return nil, parseError(resp.StatusCode, data)
		}
		return resp.Body, nil
	}
	return nil, lastErr
}

// authToken returns the token that authenticates calls, asking etcd for one
// (hedged, as every request) on first use when the URL names a user.
func (c *client) authToken(ctx context.Context) (string, error) {
	if c.user == "" {
		return "", nil
	}
	c.authMu.Lock()
	defer c.authMu.Unlock()
	if c.token != "" {
		return c.token, nil
	}
	body, err := json.Marshal(map[string]string{"name": c.user, "password": c.password})
	if err != nil {
		return "", err
	}
	data, err := failover.Do(ctx, c.endpoints, func(ctx context.Context, base string) ([]byte, error) {
		return c.send(ctx, base+"/v3/auth/authenticate", body, "")
	}, tryElsewhere)
	if err != nil {
		return "", err
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return "", fmt.Errorf("unreadable answer to authenticate: %w", err)
	}
	c.token = out.Token
	return c.token, nil
}

func (c *client) dropToken() {
	c.authMu.Lock()
	c.token = ""
	c.authMu.Unlock()
}

// parseError reads etcd's error answer; one that is not etcd's JSON keeps
// the HTTP status.
func parseError(status int, data []byte) *etcdError {
	e := &etcdError{}
	if json.Unmarshal(data, e) != nil || e.Error() == "" {
		e.Message = fmt.Sprintf("HTTP %d: %s", status, leasestore.FirstLine(strings.TrimSpace(string(data))))
	}
	return e
}

func (c *client) close() { c.hc.CloseIdleConnections() }
