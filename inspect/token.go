package inspect

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasectl/leasectl/leasestore"
)

// TokenCheck is the answer to "may this fencing token still be used?".
type TokenCheck struct {
	Job   string
	Token int64
	// Valid is true when Token is the job's current token and its lease is
	// live.
	Valid bool
	// Current is the job's current token (0 when the store has none); Live
	// whether its lease is live.
	Current int64
	Live    bool
	// Reason says why an invalid token is stale; empty when Valid.
	Reason string
}

// CheckToken asks s whether token is job's current fencing token with a
// live lease. A stale token is an answer, not an error: the error is for a
// store that could not answer.
func CheckToken(ctx context.Context, s *leasestore.Store, job string, token int64) (TokenCheck, error) {
	err := s.CheckToken(ctx, job, token)
	var stale *leasestore.StaleTokenError
	switch {
	case err == nil:
		return TokenCheck{Job: job, Token: token, Valid: true, Current: token, Live: true}, nil
	case errors.As(err, &stale):
		return TokenCheck{Job: job, Token: token, Current: stale.Current, Live: stale.Live, Reason: stale.Error()}, nil
	default:
		return TokenCheck{}, fmt.Errorf("check token %d of job %q: %w", token, job, err)
	}
}

type tokenCheckJSON struct {
	Job          string `json:"job"`
	Token        int64  `json:"token"`
	Valid        bool   `json:"valid"`
	CurrentToken int64  `json:"current_token"`
	Live         bool   `json:"live"`
	Reason       string `json:"reason"`
}

// TokenCheck prints a token check. Only --json writes anything on stdout,
// and on a terminal a valid token says so in one line; a stale token's
// reason is the caller's to print on stderr, with its exit status.
func (p *Printer) TokenCheck(c TokenCheck) error {
	var err error
	switch {
	case p.Format == FormatJSON:
		err = p.writeJSON(tokenCheckJSON{Job: c.Job, Token: c.Token, Valid: c.Valid, CurrentToken: c.Current, Live: c.Live, Reason: c.Reason})
	case p.Format == FormatTable && c.Valid:
		_, err = fmt.Fprintf(p.Out, "token %d is the current token of job %s and its lease is live\n", c.Token, c.Job)
	}
	return err
}
