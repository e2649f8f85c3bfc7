package inspect

import (
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Leases prints the leases held now: job, worker, host, token, how long
// each has been running and its TTL left, relative to the store's clock when
// it was read (p.Now for a store that did not say), and the holder's last
// renewal round trip (blank when the store has none). A lease of a job in
// overdue is marked: "overdue" after its job on a terminal, "overdue": true
// in JSON; piped lines stay as they are. Overdue jobs not running are
// counted in one line on stderr, with the command that lists them. An
// empty list says "no leases held".
func (p *Printer) Leases(hs []leasestore.Holder, overdue []leasestore.Overdue) error {
	late := map[string]bool{}
	for _, o := range overdue {
		late[o.Job] = true
	}
	if err := p.overdueNote(hs, late); err != nil {
		return err
	}
	if len(hs) == 0 {
		return p.empty("no leases held")
	}
	if p.Format == FormatJSON {
		out := make([]leaseJSON, len(hs))
		for i := range hs {
			out[i] = leaseView(&hs[i], p.readAt(&hs[i]))
			out[i].Overdue = late[hs[i].Job]
		}
		return p.writeJSON(out)
	}
	g := grid{headers: []string{"JOB", "WORKER", "HOST", "TOKEN", "RUNNING FOR", "TTL LEFT", "RTT"}}
	g.text = textColumns(g.headers, "JOB", "WORKER", "HOST")
	for i := range hs {
		h := &hs[i]
		now := p.readAt(h)
		job := textCell(h.Job)
		if late[h.Job] {
			job.text += " (overdue)"
		}
		g.rows = append(g.rows, []cell{
			job, textCell(h.Worker), textCell(h.Host), tokenCell(h.Token),
			durationCell(max(now.Sub(h.StartedAt), 0)), durationCell(max(h.ExpiresAt.Sub(now), 0)), rttCell(h.LastRTT),
		})
	}
	return p.writeGrid(g)
}

// overdueNote says on stderr how many overdue jobs are not running (a
// job that stopped running is the usual overdue one, and ls shows only the
// running), naming the command that lists them.
func (p *Printer) overdueNote(hs []leasestore.Holder, late map[string]bool) error {
	n := len(late)
	for i := range hs {
		if late[hs[i].Job] {
			n--
		}
	}
	if n == 0 {
		return nil
	}
	_, err := fmt.Fprintf(p.ErrOut, "%d job(s) overdue and not running: leasectl scan --overdue lists them\n", n)
	return err
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
