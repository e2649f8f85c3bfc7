package inspect

import (
	"github.com/leasectl/leasectl/leasestore"
)

// Leases prints the leases held now: job, worker, host, token, how long
// each has been running and its TTL left, relative to p.Now. An empty list
// says "no leases held".
func (p *Printer) Leases(hs []leasestore.Holder) error {
	if len(hs) == 0 {
		return p.empty("no leases held")
	}
	if p.Format == FormatJSON {
		out := make([]leaseJSON, len(hs))
		for i := range hs {
			out[i] = leaseView(&hs[i], p.Now)
		}
		return p.writeJSON(out)
	}
	g := grid{headers: []string{"JOB", "WORKER", "HOST", "TOKEN", "RUNNING FOR", "TTL LEFT"}}
	for i := range hs {
		h := &hs[i]
		g.rows = append(g.rows, []cell{
			textCell(h.Job), textCell(h.Worker), textCell(h.Host), tokenCell(h.Token),
			durationCell(max(p.Now.Sub(h.StartedAt), 0)), durationCell(max(h.ExpiresAt.Sub(p.Now), 0)),
		})
	}
	return p.writeGrid(g)
}
