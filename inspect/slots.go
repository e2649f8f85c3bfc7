package inspect

import (
	"fmt"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// What status shows of a job of several slots (--slots) and of its queue
// of waiters: the slots in use and free, each holder by slot, and who
// waits, in order, since when.

// holders are st's live leases by slot: its Holders, or its one Holder
// from a store that reports no more.
func holders(st *leasestore.JobStatus) []leasestore.Holder {
	if len(st.Holders) == 0 && st.Holder != nil {
		return []leasestore.Holder{*st.Holder}
	}
	return st.Holders
}

// slotFields are the fields of a job of several slots, and of its queue;
// none for a job of one slot that nobody waits for.
func slotFields(st *leasestore.JobStatus) []field {
	now := st.Now
	var fields []field
	if st.Slots > 1 {
		held := holders(st)
		fields = append(fields,
			field{label: "slots", value: textCell(fmt.Sprintf("%d of %d in use, %d free", len(held), st.Slots, st.Slots-len(held)))},
			field{key: "slots", value: intCell(int64(st.Slots))},
			field{key: "slots_in_use", value: intCell(int64(len(held)))},
		)
		for _, h := range held {
			fields = append(fields, field{label: fmt.Sprintf("slot %d", h.Slot), key: fmt.Sprintf("slot_%d", h.Slot),
				value: textCell(fmt.Sprintf("%s on %s (pid %d), token %d, ttl left %s",
					h.Worker, h.Host, h.PID, h.Token, shortDuration(max(h.ExpiresAt.Sub(now), 0))))})
		}
	}
	for i, w := range st.Queue {
		fields = append(fields, field{label: fmt.Sprintf("waiting %d", i+1), key: fmt.Sprintf("queue_%d", i+1),
			value: textCell(fmt.Sprintf("%s on %s (pid %d), for %s", w.Worker, w.Host, w.PID, shortDuration(max(now.Sub(w.Since), 0))))})
	}
	return fields
}

// waiterJSON is a waiter as status --json shows it.
type waiterJSON struct {
	Position     int      `json:"position"`
	Worker       string   `json:"worker"`
	Host         string   `json:"host"`
	PID          int      `json:"pid"`
	Since        jsonTime `json:"since"`
	WaitingForMS int64    `json:"waiting_for_ms"`
}

func queueView(queue []leasestore.Waiter, now time.Time) []waiterJSON {
	out := make([]waiterJSON, len(queue))
	for i, w := range queue {
		out[i] = waiterJSON{Position: i + 1, Worker: w.Worker, Host: w.Host, PID: w.PID, Since: jsonTime(w.Since),
			WaitingForMS: millis(max(now.Sub(w.Since), 0))}
	}
	return out
}

func holdersView(st *leasestore.JobStatus) []leaseJSON {
	held := holders(st)
	out := make([]leaseJSON, len(held))
	for i := range held {
		out[i] = leaseView(&held[i], st.Now)
	}
	return out
}
