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
	"sync/atomic"
	"time"
)

// client speaks etcd's v3 API as JSON over HTTP (the gRPC gateway every
// etcd member serves on its client port). It never retries a request that
// may have reached a member: only one refused at connect time moves on to
// the next endpoint, and one refused for an expired auth token is sent
// again after authenticating (etcd did not apply it).
type client struct {
	endpoints []string // base URLs, http:// or https://
	preferred atomic.Int32
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
		endpoints: endpoints,
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

// call posts in as JSON to path on the preferred member and decodes the
// answer into out.
func (c *client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	for reauth := 0; ; reauth++ {
		resp, err := c.post(ctx, path, body)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			c.failed(resp.Request)
			return err
		}
		if resp.StatusCode != http.StatusOK {
			e := parseError(resp.StatusCode, data)
			if e.Code == codeUnauthenticated && c.user != "" && reauth == 0 && strings.Contains(e.Message, "invalid auth token") {
				c.dropToken()
				continue
			}
			if e.Code == codeUnavailable {
				c.failed(resp.Request)
			}
			return e
		}
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("unreadable answer from %s: %w", resp.Request.URL.Host, err)
		}
		return nil
	}
}

// stream posts body to path and returns the answer's body, which streams
// one JSON object per message, for the caller to close.
func (c *client) stream(ctx context.Context, path string, body []byte) (io.ReadCloser, error) {
	resp, err := c.post(ctx, path, body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, parseError(resp.StatusCode, data)
	}
	return resp.Body, nil
}

// post sends body to the preferred member, moving on to the next one only
// when a member refuses the connection (nothing was sent).
func (c *client) post(ctx context.Context, path string, body []byte) (*http.Response, error) {
	token, err := c.authToken(ctx)
	if err != nil {
		return nil, err
	}
	first := int(c.preferred.Load())
	var lastErr error
	for i := range c.endpoints {
		n := (first + i) % len(c.endpoints)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoints[n]+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			c.preferred.Store(int32(n))
			return resp, nil
		}
		lastErr = err
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" || ctx.Err() != nil {
			c.failed(req)
			return nil, err
		}
	}
	return nil, lastErr
}

// failed makes the next call start with the member after the one req went
// to: it did not answer in time, broke the connection or lost its quorum.
func (c *client) failed(req *http.Request) {
	for i, e := range c.endpoints {
		if strings.HasSuffix(e, "//"+req.URL.Host) {
			c.preferred.CompareAndSwap(int32(i), int32((i+1)%len(c.endpoints)))
			return
		}
	}
}

// authToken returns the token that authenticates calls, asking etcd for one
// on first use when the URL names a user.
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
	first := int(c.preferred.Load())
	var lastErr error
	for i := range c.endpoints {
		n := (first + i) % len(c.endpoints)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoints[n]+"/v3/auth/authenticate", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.hc.Do(req)
		if err != nil {
			lastErr = err
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" && ctx.Err() == nil {
				continue
			}
			return "", err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", parseError(resp.StatusCode, data)
		}
		var out struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(data, &out); err != nil {
			return "", fmt.Errorf("unreadable answer to authenticate: %w", err)
		}
		c.preferred.Store(int32(n))
		c.token = out.Token
		return c.token, nil
	}
	return "", lastErr
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
		e.Message = fmt.Sprintf("HTTP %d: %s", status, firstLine(strings.TrimSpace(string(data))))
	}
	return e
}

func (c *client) close() { c.hc.CloseIdleConnections() }

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
