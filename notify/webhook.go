package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// HeaderIdempotencyKey carries Event.IdempotencyKey on every webhook call.
const HeaderIdempotencyKey = "Idempotency-Key"

// Webhook POSTs each event to a URL.
type Webhook struct {
	url    string
	name   string // the URL without its path, query or user: they may hold secrets
	format Format
	client *http.Client
	agent  string
}

// NewWebhook is a webhook to raw, whose body is written in format, sent
// with client (nil: http.DefaultClient) and User-Agent agent. It accepts
// http and https URLs with a host, and names the sink by its scheme and
// host alone: a webhook's path often is its secret (Slack's are).
func NewWebhook(raw string, format Format, client *http.Client, agent string) (*Webhook, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("invalid webhook URL: want http(s)://HOST/PATH")
	}
	if client == nil {
		client = http.DefaultClient
	}
	return &Webhook{url: raw, name: u.Scheme + "://" + u.Host + "/…", format: format, client: client, agent: agent}, nil
}

// String names the webhook by its scheme and host.
func (w *Webhook) String() string { return "webhook " + w.name }

// ID identifies the webhook by its name and its whole URL's hash: the
// receiver it addresses, whatever the body's format.
func (w *Webhook) ID() string { return sinkID(w.String(), "webhook\x00"+w.url) }

// Send POSTs e; a 2xx answer is delivery. An error never holds the URL.
func (w *Webhook) Send(ctx context.Context, e Event) error {
	body, err := e.Body(w.format)
	if err != nil {
		return fmt.Errorf("encode the event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return errors.New("cannot build the request")
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderIdempotencyKey, e.IdempotencyKey)
	if w.agent != "" {
		req.Header.Set("User-Agent", w.agent)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the whole URL
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	return nil
}
