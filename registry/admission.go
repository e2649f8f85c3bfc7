package registry

import (
	"crypto/sha256"

	"github.com/leasectl/leasectl/registry/api"
)

// admission bounds what the registry holds for its clients (subscriptions,
// token watches): maxTotal in all, maxPerOwner for one bearer token. It
// counts what each token holds; the lock of the hub that holds them guards
// it too.
type admission struct {
	what        string // what is held, plural: "subscriptions"
	code        string // the error code of a refusal
	advice      string // what a client refused for its token can do
	maxTotal    int
	maxPerOwner int // lowered by tests

	byOwner map[[sha256.Size]byte]int
}

func newAdmission(what, code, advice string, maxTotal, maxPerOwner int) admission {
	return admission{what: what, code: code, advice: advice, maxTotal: maxTotal, maxPerOwner: maxPerOwner,
		byOwner: map[[sha256.Size]byte]int{}}
}

// admit counts one more held for the token with digest owner, the registry
// holding held in all, or returns why it may not have one.
func (a *admission) admit(owner [sha256.Size]byte, held int) error {
	if held >= a.maxTotal {
		return api.Errorf(a.code, "the registry holds %d %s, its limit", a.maxTotal, a.what)
	}
	if a.byOwner[owner] >= a.maxPerOwner {
		return api.Errorf(a.code, "this token holds %d %s, the limit for one token; %s", a.maxPerOwner, a.what, a.advice)
	}
	a.byOwner[owner]++
	return nil
}

// release counts one fewer held for owner.
func (a *admission) release(owner [sha256.Size]byte) {
	if a.byOwner[owner]--; a.byOwner[owner] == 0 {
		delete(a.byOwner, owner)
	}
}
