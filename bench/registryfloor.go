//go:build linux

package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// startFloor starts the registry's floor (bench/tlsfloor) with serve's
// certificates, answering with answers (floorAnswers), and returns it with
// its URL once it serves.
func (b *bench) startFloor(certs testcert.Files, answers []byte) (*exec.Cmd, string, error) {
	file := b.file("floor-answers")
	if err := os.WriteFile(file, answers, 0o600); err != nil {
		return nil, "", err
	}
	cmd := exec.Command(b.tlsFloor, "-cert", certs.ServerCert, "-key", certs.ServerKey, "-answers", file)
	url, err := startServing(cmd, "the registry's floor")
	if err != nil {
		return nil, "", err
	}
	return cmd, url, nil
}

// floorAnswers are the floor's canned answers, in the file tlsfloor reads:
// to an acquire, serve's grant of l, asked for with req; to a heartbeat, a
// renewal of l; each with the headers serve sets on its answers (its clock,
// a request ID, no caching, JSON) and, like serve's, a newline after the
// JSON. So they have the size and shape of serve's, and the workers, who
// send the floor's clock back as their deadline, send requests of the same
// size too.
func floorAnswers(l *leasestore.Lease, req leasestore.AcquireRequest) ([]byte, error) {
	grant, err := json.Marshal(api.FromLease(l, req))
	if err != nil {
		return nil, err
	}
	renewal, err := json.Marshal(api.Heartbeat{NewLeaseExpiry: time.Now().Add(l.TTL).UTC(), TTLMS: api.MS(l.TTL)})
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	// serve's clock is read in microseconds since it started: about a
	// minute into this step.
	h.Set(api.HeaderClock, api.Clock{Instance: randomID(), Micros: time.Minute.Microseconds()}.String())
	h.Set(api.HeaderRequestID, randomID())
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "application/json")
	return json.Marshal(struct {
		Header http.Header       `json:"header"`
		Bodies map[string]string `json:"bodies"`
	}{h, map[string]string{api.PathAcquire: string(grant) + "\n", api.PathHeartbeat: string(renewal) + "\n"}})
}

// randomID is an ID the size of serve's request IDs and clock instances: 12
// random bytes in hex.
func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
