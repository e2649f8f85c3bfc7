package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Sink is where events are sent.
type Sink interface {
	// Send delivers e; nil means the sink took it (a 2xx answer, exit
	// status 0). ctx bounds the attempt. Its error need not name the sink,
	// and must hold no secret.
	Send(ctx context.Context, e Event) error
	// String names the sink in logs and errors, without secrets.
	String() string
	// ID identifies the sink in the store's record of the sinks that took
	// a notice (leasestore.Notice.SentTo): the same for the same
	// configuration on every reaper and after a restart, and without
	// secrets (see sinkID).
	ID() string
}

// sinkID is the ID of a sink named name whose whole configuration is
// config: its name and the first 8 bytes of config's SHA-256, which tells
// two sinks of one name apart (two webhooks to one host) and reveals
// nothing of config's secrets.
func sinkID(name, config string) string {
	sum := sha256.Sum256([]byte(config))
	return name + "#" + hex.EncodeToString(sum[:8])
}
