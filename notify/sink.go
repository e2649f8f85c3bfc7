package notify

import "context"

// Sink is where events are sent.
type Sink interface {
	// Send delivers e; nil means the sink took it (a 2xx answer, exit
	// status 0). ctx bounds the attempt. Its error need not name the sink,
	// and must hold no secret.
	Send(ctx context.Context, e Event) error
	// String names the sink in logs and errors, without secrets.
	String() string
}
