package httpstore

import (
	"sync"
	"time"

	"github.com/leasectl/leasectl/registry/api"
)

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
