package notify

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Schema names the version of Event's JSON, its "schema" field. Fields
// may be added within a version; none is removed or changes meaning.
const Schema = "leasectl.event/v1"

// Event is a notice as sinks receive it: the webhook's JSON body, the
// command's stdin (README, Alerting; docs/semantics.md, Notices).
type Event struct {
	Schema string `json:"schema"`
	// IdempotencyKey identifies the event: a receiver that sees it twice
	// (a redelivery) has seen one event. Also the Idempotency-Key header.
	IdempotencyKey string                `json:"idempotency_key"`
	Kind           leasestore.NoticeKind `json:"kind"`
	Job            string                `json:"job"`
	Namespace      string                `json:"namespace,omitempty"`
	// At is when the event happened; Due, when an overdue job became due.
	At      time.Time  `json:"at"`
	Due     *time.Time `json:"due,omitempty"`
	Worker  string     `json:"worker,omitempty"`
	Host    string     `json:"host,omitempty"`
	Token   int64      `json:"token,omitempty"`
	Crashes int        `json:"crashes,omitempty"`
	By      string     `json:"by,omitempty"`
	// Text is the event in one line, for people.
	Text string `json:"text"`
	// Attempt counts the delivery attempts of this event, from 1, over
	// every sink: a sink that was down gets it at the attempt it came back.
	Attempt int `json:"attempt"`
}

// EventOf is notice n of namespace as sinks receive it.
func EventOf(n leasestore.Notice, namespace string) Event {
	e := Event{Schema: Schema, IdempotencyKey: n.Key, Kind: n.Kind, Job: n.Job, Namespace: namespace, At: n.At.UTC(),
		Worker: n.Worker, Host: n.Host, Token: n.Token, Crashes: n.Crashes, By: n.By, Text: n.Detail, Attempt: max(n.Attempts, 1)}
	if !n.Due.IsZero() {
		due := n.Due.UTC()
		e.Due = &due
	}
	return e
}

// Format is how a webhook's body is written.
type Format string

// Body formats.
const (
	FormatJSON  Format = "json"  // Event's JSON
	FormatSlack Format = "slack" // {"text": ...}, which Slack's incoming webhooks (and Mattermost's, Rocket.Chat's) take
)

// Formats are the formats, for flag validation.
var Formats = []Format{FormatJSON, FormatSlack}

// Body is e written in format f.
func (e Event) Body(f Format) ([]byte, error) {
	if f == FormatSlack {
		return json.Marshal(struct {
			Text string `json:"text"`
		}{e.SlackText()})
	}
	return json.Marshal(e)
}

// SlackText is the event in one line of Slack's text: its kind in bold,
// then its words.
func (e Event) SlackText() string {
	ns := ""
	if e.Namespace != "" {
		ns = " (" + e.Namespace + ")"
	}
	return fmt.Sprintf("*leasectl %s*%s: %s", e.Kind, ns, e.Text)
}
