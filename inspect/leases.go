package inspect

import (
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Leases prints the leases held now: job, worker, host, token, how long
// each has been running and its TTL left, relative to the store's clock when
// it was read (p.Now for a store that did not say), and the holder's last
// renewal round trip (blank when the store has none). An empty list says
// "no leases held".
func (p *Printer) Leases(hs []leasestore.Holder) error {
	if len(hs) == 0 {
		return p.empty("no leases held")
	}
	if p.Format == FormatJSON {
		out := make([]leaseJSON, len(hs))
		for i := range hs {
			out[i] = leaseView(&hs[i], p.readAt(&hs[i]))
		}
		return p.writeJSON(out)
	}
	g := grid{headers: []string{"JOB", "WORKER", "HOST", "TOKEN", "RUNNING FOR", "TTL LEFT", "RTT"}}
	g.text = textColumns(g.headers, "JOB", "WORKER", "HOST")
	for i := range hs {
		h := &hs[i]
		now := p.readAt(h)
		g.rows = append(g.rows, []cell{
			textCell(h.Job), textCell(h.Worker), textCell(h.Host), tokenCell(h.Token),
			durationCell(max(now.Sub(h.StartedAt), 0)), durationCell(max(h.ExpiresAt.Sub(now), 0)), rttCell(h.LastRTT),
		})
	}
	return p.writeGrid(g)
}

// rttCell shows a renewal round trip to the tenth of a millisecond (it is
// measured against a margin of --safety - --heartbeat), or blank when
// unknown.
func rttCell(d time.Duration) cell {
	if d <= 0 {
		return optional("")
	}
	return cell{text: d.Round(100 * time.Microsecond).String(), plain: d.Round(100 * time.Microsecond).String()}
}

// readAt is the clock h's ages are relative to: the store's, when it said.
func (p *Printer) readAt(h *leasestore.Holder) time.Time {
	if h.ReadAt.IsZero() {
		return p.Now
	}
	return h.ReadAt
}
