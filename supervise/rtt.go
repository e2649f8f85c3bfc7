package supervise

import (
	"fmt"
	"time"
)

// rttWarnings are the shares of the renewal margin at which a renewal's
// round trip is warned about, each once per run. The margin is --safety −
// --heartbeat: the next renewal is sent a heartbeat after this one, and must
// be confirmed before this one's send time + --safety, so a round trip
// longer than the margin loses the lease. Half the margin warns while there
// is room to act; four fifths says it is about to go.
var rttWarnings = []float64{0.5, 0.8}

// roundTrip records a confirmed renewal's round trip: it goes with the next
// renewal (Lease.RTT), so that status and ls show it, and is warned about
// as it approaches the renewal margin.
func (r *run) roundTrip(rtt time.Duration) {
	r.lease.RTT = rtt
	margin := r.cfg.Safety - r.cfg.Heartbeat
	crossed := r.rttWarned
	for crossed < len(rttWarnings) && float64(rtt) >= rttWarnings[crossed]*float64(margin) {
		crossed++
	}
	if crossed == r.rttWarned {
		return
	}
	r.rttWarned = crossed
	r.log.Warn().Dur("rtt", rtt).Dur("margin", margin).Dur("safety", r.cfg.Safety).Dur("heartbeat", r.cfg.Heartbeat).
		Msg(fmt.Sprintf("renewal round trip %s is %.0f%% of the renewal margin (--safety %s - --heartbeat %s = %s): "+
			"a round trip past it loses the lease; raise --ttl (and --safety with it) or lower --heartbeat",
			rtt.Round(time.Millisecond), 100*float64(rtt)/float64(margin), r.cfg.Safety, r.cfg.Heartbeat, margin))
}
