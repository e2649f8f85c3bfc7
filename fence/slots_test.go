package fence

import (
	"errors"
	"net/http"
	"strconv"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// acceptIn asserts that c accepts token for job in slot.
func acceptIn(t *testing.T, c *Checker, job string, slot int, token int64) {
	t.Helper()
	if err := c.CheckSlot(t.Context(), job, slot, token); err != nil {
		t.Fatalf("CheckSlot(%s, slot %d, %d) = %v, want accepted", job, slot, token, err)
	}
}

// refuseIn asserts that c refuses token for job in slot as stale and
// returns why.
func refuseIn(t *testing.T, c *Checker, job string, slot int, token int64) *StaleError {
	t.Helper()
	err := c.CheckSlot(t.Context(), job, slot, token)
	var se *StaleError
	if !errors.As(err, &se) {
		t.Fatalf("CheckSlot(%s, slot %d, %d) = %v, want a *StaleError", job, slot, token, err)
	}
	if se.Job != job || se.Slot != slot || se.Token != token {
		t.Errorf("StaleError %+v names another job, slot or token than %s %d %d", se, job, slot, token)
	}
	return se
}

// slotted is a request for a lease on one of job's three slots.
func slotted(job, worker string) leasestore.AcquireRequest {
	req := storetest.Request(job, worker, storetest.LongTTL)
	req.Slots = 3
	return req
}

// A job of three slots has three live runs, each with its token: every
// pattern admits each in its slot; a new grant of slot 1 ends the older
// token of slot 1 and leaves the tokens of slots 0 and 2 admitted, on
// every store.
func TestSlotsFencedApartOnRealStores(t *testing.T) {
	for _, kind := range realStores {
		for _, p := range patternsFor(t, kind) {
			t.Run(kind.name+"/"+p.String(), func(t *testing.T) {
				checked, holder, _ := kind.open(t)
				c, _ := checker(t, checked, Options{Pattern: p})
				runs := make([]*leasestore.Lease, 3)
				for i, w := range []string{"a", "b", "c"} {
					l := storetest.Acquire(t, holder, slotted("job", w))
					if l.Slot != i {
						t.Fatalf("run %s got slot %d, want %d", w, l.Slot, i)
					}
					runs[i] = l
				}
				settle(t, p, checked)
				for _, l := range runs {
					acceptIn(t, c, "job", l.Slot, l.Token)
				}
				storetest.Release(t, holder, runs[1], leasestore.ResultFailed)
				next := storetest.Acquire(t, holder, slotted("job", "d"))
				if next.Slot != 1 {
					t.Fatalf("run d got slot %d, want the freed slot 1", next.Slot)
				}
				settle(t, p, checked)
				acceptIn(t, c, "job", 1, next.Token)
				if se := refuseIn(t, c, "job", 1, runs[1].Token); se.FromStore || se.Newest != next.Token {
					t.Errorf("StaleError %+v, want a refusal from memory naming %d", se, next.Token)
				}
				for _, l := range []*leasestore.Lease{runs[0], runs[2]} {
					acceptIn(t, c, "job", l.Slot, l.Token)
				}
				if p == WriteThrough {
					// The feed tells the newest token only: the other live
					// runs are asked about at every check.
					older := storeChecks(c, func() { acceptIn(t, c, "job", 0, runs[0].Token) })
					newest := storeChecks(c, func() { acceptIn(t, c, "job", 1, next.Token) })
					if older != 1 || newest != 0 {
						t.Errorf("store checks: %d for an older live run, %d for the newest; want 1 and 0", older, newest)
					}
				}
				// Admitted writes of different slots run side by side: the
				// newest token's admission does not wait for the others'.
				var dones []func()
				for _, l := range []*leasestore.Lease{runs[0], runs[2], next} {
					done, err := c.AdmitSlot(storetest.Ctx(t), "job", l.Slot, l.Token)
					if err != nil {
						t.Fatalf("AdmitSlot(slot %d, %d) = %v", l.Slot, l.Token, err)
					}
					dones = append(dones, done)
				}
				for _, done := range dones {
					done()
				}
				// A run that ended is refused by the store, and from then on
				// from memory; bounded staleness accepts it until its
				// confirmation expires, the pattern's bound.
				storetest.Release(t, holder, runs[0], leasestore.ResultCompleted)
				settle(t, p, checked)
				if p != BoundedStaleness {
					if se := refuseIn(t, c, "job", 0, runs[0].Token); !se.FromStore {
						t.Errorf("StaleError %+v, want the store's refusal of an ended run", se)
					}
					if se := refuseIn(t, c, "job", 0, runs[0].Token); se.FromStore {
						t.Errorf("StaleError %+v, want a refusal from memory of a run known to have ended", se)
					}
				}
			})
		}
	}
}

// threeRuns returns three live runs of a job of three slots on a fresh
// embedded store, and the checker's client of that store.
func threeRuns(t *testing.T) (*leasestore.Store, []*leasestore.Lease) {
	dir := t.TempDir()
	checked, holder := openEmbedded(t, dir), openEmbedded(t, dir)
	var runs []*leasestore.Lease
	for _, w := range []string{"a", "b", "c"} {
		runs = append(runs, storetest.Acquire(t, holder, slotted("job", w)))
	}
	return checked, runs
}

// A job checked without a slot keeps one mark, as before slots: of three
// live runs only the newest is admitted (docs/fencing.md, "Several
// slots").
func TestCheckWithoutSlotKeepsOneMarkPerJob(t *testing.T) {
	checked, runs := threeRuns(t)
	for _, p := range patterns {
		t.Run(p.String(), func(t *testing.T) {
			c, _ := checker(t, checked, Options{Pattern: p})
			settle(t, p, checked)
			accept(t, c, "job", runs[2].Token)
			if se := refuse(t, c, "job", runs[0].Token); se.FromStore || se.Newest != runs[2].Token {
				t.Errorf("StaleError %+v, want a refusal from memory naming %d", se, runs[2].Token)
			}
		})
	}
}

func TestCheckSlotRejectsInvalidSlots(t *testing.T) {
	c, _ := checker(t, newFakeStore(), Options{})
	for _, slot := range []int{-1, leasestore.MaxSlots} {
		if err := c.CheckSlot(t.Context(), "job", slot, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckSlot(slot %d) = %v, want ErrInvalid", slot, err)
		}
	}
}

// The middleware admits a request in the slot its Leasectl-Slot header
// names, and in slot 0 without one.
func TestMiddlewareReadsTheSlot(t *testing.T) {
	checked, runs := threeRuns(t)
	c, _ := checker(t, checked, Options{Pattern: BoundedStaleness})
	withSlot := func(l *leasestore.Lease, slot string) map[string]string {
		h := headers("job", l.Token)
		h[HeaderSlot] = slot
		return h
	}
	for _, l := range []*leasestore.Lease{runs[2], runs[0], runs[1]} {
		if rec, called := serve(t, c, withSlot(l, strconv.Itoa(l.Slot))); !called {
			t.Fatalf("slot %d's token %d refused: %d %s", l.Slot, l.Token, rec.Code, rec.Body)
		}
	}
	rec, _ := serve(t, c, withSlot(runs[0], "2"))
	if r := refusal(t, rec, http.StatusConflict); r.Slot != 2 || r.NewestToken != runs[2].Token {
		t.Errorf("slot 0's token claimed for slot 2: refusal %+v, want stale in slot 2 below %d", r, runs[2].Token)
	}
	if rec, called := serve(t, c, headers("job", runs[0].Token)); !called {
		t.Errorf("without the slot header, slot 0's token %d was refused: %d %s", runs[0].Token, rec.Code, rec.Body)
	}
	for _, bad := range []string{"x", "-1", strconv.Itoa(leasestore.MaxSlots)} {
		rec, _ := serve(t, c, withSlot(runs[0], bad))
		if r := refusal(t, rec, http.StatusBadRequest); r.Error != "bad_request" {
			t.Errorf("slot %q: refusal %+v, want bad_request", bad, r)
		}
	}
}

// A writer that names the wrong slot for its live token raises that slot's
// mark, so the slot's real run, with a lower token, is refused; it cannot
// have a token accepted that the store refuses, in any slot it names.
func TestWrongSlotDeniesButDoesNotAdmit(t *testing.T) {
	checked, runs := threeRuns(t)
	c, _ := checker(t, checked, Options{})
	acceptIn(t, c, "job", 0, runs[2].Token)
	if se := refuseIn(t, c, "job", 0, runs[0].Token); se.Newest != runs[2].Token {
		t.Errorf("StaleError %+v, want slot 0's real run refused below %d", se, runs[2].Token)
	}
	acceptIn(t, c, "job", 1, runs[1].Token)
	if se := refuseIn(t, c, "job", 2, runs[2].Token+1000); !se.FromStore {
		t.Errorf("StaleError %+v, want the store's refusal of a token never granted", se)
	}
}
