package registry

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"os"
	"strings"
)

// Role is what a bearer token may do. Roles are cumulative: a worker may do
// what a reader may, an operator what a worker may.
type Role int

// The roles of a tokens file.
const (
	// RoleReader may read: job status, live leases, quarantined jobs,
	// counts, token checks, metrics, and follow jobs' fencing tokens
	// (token watches and their heartbeat): a downstream checker needs no
	// worker's token.
	RoleReader Role = iota + 1
	// RoleWorker may also run jobs: acquire, heartbeat, complete, release,
	// record a run's late outcome, and wait for releases.
	RoleWorker
	// RoleOperator may also quarantine, release from quarantine and scan.
	RoleOperator
)

// String is the role's name in a tokens file.
func (r Role) String() string {
	switch r {
	case RoleReader:
		return "reader"
	case RoleWorker:
		return "worker"
	case RoleOperator:
		return "operator"
	default:
		return "none"
	}
}

// parseRole reads a role's name.
func parseRole(s string) (Role, bool) {
	for _, r := range []Role{RoleReader, RoleWorker, RoleOperator} {
		if r.String() == s {
			return r, true
		}
	}
	return 0, false
}

// MinTokenLen is the shortest bearer token a tokens file may hold: 16
// characters, so that no token can be guessed in the time a rate limit
// allows (`openssl rand -hex 32` makes a good one).
const MinTokenLen = 16

// Tokens are the bearer tokens a registry accepts, each with its role. Only
// their SHA-256 digests are kept.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	role   Role
}

// TokensError is a tokens file that cannot be used; it names the file and
// line, never a token.
type TokensError struct {
	File   string
	Line   int // 0: the file as a whole
	Reason string
}

// Error names the file, the line and what is wrong.
func (e *TokensError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("tokens file %s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("tokens file %s, line %d: %s", e.File, e.Line, e.Reason)
}

// LoadTokens reads the tokens file at path (see ParseTokens).
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &TokensError{File: path, Reason: err.Error()}
	}
	defer f.Close()
	return ParseTokens(f, path)
}

// ParseTokens reads a tokens file: one "ROLE TOKEN" pair a line, ROLE
// being worker, operator or reader; a # starts a comment, on a line of its
// own or after a pair, and blank lines are ignored. A token is at least
// MinTokenLen characters without spaces, does not start with #, and
// appears once. A file without any token is refused: it would lock
// everyone out. name is the file's name, for errors.
func ParseTokens(r io.Reader, name string) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if strings.HasPrefix(f, "#") { // a comment, on a line of its own or after a token
				fields = fields[:i]
				break
			}
		}
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return nil, &TokensError{File: name, Line: n, Reason: fmt.Sprintf("want ROLE TOKEN, got %d fields", len(fields))}
		}
		role, ok := parseRole(fields[0])
		if !ok {
			return nil, &TokensError{File: name, Line: n, Reason: fmt.Sprintf("unknown role %q (use worker, operator or reader)", fields[0])}
		}
		if len(fields[1]) < MinTokenLen {
			return nil, &TokensError{File: name, Line: n, Reason: fmt.Sprintf("the token is shorter than %d characters", MinTokenLen)}
		}
		d := sha256.Sum256([]byte(fields[1]))
		if first, dup := seen[d]; dup {
			return nil, &TokensError{File: name, Line: n, Reason: fmt.Sprintf("the token of line %d again", first)}
		}
		seen[d] = n
		t.entries = append(t.entries, tokenEntry{digest: d, role: role})
	}
	if err := sc.Err(); err != nil {
		return nil, &TokensError{File: name, Reason: err.Error()}
	}
	if len(t.entries) == 0 {
		return nil, &TokensError{File: name, Reason: "no token (add a line ROLE TOKEN)"}
	}
	return t, nil
}

// Len is how many tokens there are.
func (t *Tokens) Len() int { return len(t.entries) }

// lookup returns the role of bearer and its digest, which identifies the
// token in the registry's memory without being it. It compares bearer's
// digest with every token's in constant time, whatever matches, so that
// neither the time taken nor an early exit says how much of a guess was
// right.
func (t *Tokens) lookup(bearer string) (Role, [sha256.Size]byte, bool) {
	d := sha256.Sum256([]byte(bearer))
	role := t.roleOf(d)
	return role, d, role != 0
}

// roleOf returns the role of the token with digest d, 0 when it is not
// one of these tokens.
func (t *Tokens) roleOf(d [sha256.Size]byte) Role {
	var role Role
	for _, e := range t.entries {
		match := subtle.ConstantTimeCompare(d[:], e.digest[:])
		role = Role(subtle.ConstantTimeSelect(match, int(e.role), int(role)))
	}
	return role
}
