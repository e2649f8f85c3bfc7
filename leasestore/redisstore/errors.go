package redisstore

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
)

// unavailable wraps a go-redis failure in an *UnavailableError whose message
// names the cause in one line and never holds the password.
func (s *Store) unavailable(op string, err error) error {
	if redis.HasErrorPrefix(err, "DB index is out of range") {
		// Not a failing store: the URL names a database the server does
		// not have, which no retry will fix.
		return &leasestore.URLError{URL: s.url, Reason: fmt.Sprintf(
			"database %d does not exist on %s (Redis has /0 to /15 unless configured with more databases)", s.db, s.server())}
	}
	return leasestore.Unavailable(op, s.explain(err), err, s.secrets...)
}

// explain names the cause of a go-redis failure, using go-redis's own
// typed error checks.
func (s *Store) explain(err error) string {
	var tlsErr *TLSError
	switch {
	case errors.As(err, &tlsErr):
		return tlsErr.Error()
	case redis.IsAuthError(err) || redis.HasErrorPrefix(err, "AUTH <password> called without any password"):
		return "Redis refused the credentials"
	case redis.IsOOMError(err):
		return "Redis is out of memory (maxmemory reached)"
	case redis.IsReadOnlyError(err):
		return "connected to a read-only replica"
	case redis.HasErrorPrefix(err, "unknown command") && scriptingRefused(err):
		return "Redis refuses Lua scripts, which leasectl needs"
	case aclDenied(err):
		return s.denial(err)
	case redis.IsLoadingError(err):
		return "Redis is still loading its data set"
	case redis.HasErrorPrefix(err, "BUSY"):
		return "Redis is busy running a slow script"
	case redis.IsClusterDownError(err):
		return "the Redis cluster is down (CLUSTERDOWN)"
	case errors.Is(err, redis.ErrClosed):
		return "the Redis client is closed"
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		if !s.tls {
			// What a TLS port does with a plain-text command.
			return fmt.Sprintf("%s closed the connection (if that port expects TLS, use rediss://)", s.server())
		}
		return fmt.Sprintf("%s closed the connection", s.server())
	}
	if msg, ok := leasestore.ExplainTransport(s.server(), "Redis", err); ok {
		return msg
	}
	return fmt.Sprintf("%s: %s", s.server(), leasestore.FirstLine(err.Error()))
}

// server names the Redis server in messages.
func (s *Store) server() string {
	if s.addr == "" {
		return "Redis"
	}
	return "Redis at " + s.addr
}

// scriptingRefused recognises a server without EVAL/EVALSHA (renamed away
// with rename-command).
func scriptingRefused(err error) bool {
	lower := strings.ToLower(err.Error())
	return strings.Contains(lower, "'eval") || strings.Contains(lower, "`eval") || strings.Contains(lower, "script")
}

// The ACL refusals Redis reports. go-redis recognises only the NOPERM
// prefix of a refused top-level command (redis.IsPermissionError); a
// command refused inside a script comes back as an ERR reply whose text
// alone says so (Redis 7.0: "The user executing the script can't run this
// command or subcommand script: <sha>, on @user_script:<line>."; later
// releases: "ACL failure in script: ..."), so the reply's text is read.
func aclDenied(err error) bool {
	if redis.IsPermissionError(err) {
		return true
	}
	var rErr redis.Error
	if !errors.As(err, &rErr) {
		return false
	}
	msg := rErr.Error()
	return strings.Contains(msg, "user executing the script can't") || strings.Contains(msg, "ACL failure in script")
}

// denial says what an ACL refusal denied and what to grant the user: the
// command (named by the reply, or found at the script line the reply
// points to), the namespace's key pattern or its channel pattern.
func (s *Store) denial(err error) string {
	msg := leasestore.FirstLine(err.Error())
	lower := strings.ToLower(msg)
	const grant = " (the README's ACL line lists everything leasectl needs)"
	switch {
	case strings.Contains(lower, "key"):
		return fmt.Sprintf("Redis ACL denies leasectl's keys: grant the user ~%s:*%s", s.ns, grant)
	case strings.Contains(lower, "channel"):
		return fmt.Sprintf("Redis ACL denies leasectl's notification channels: grant the user &%s:*%s", s.ns, grant)
	}
	cmd := quotedCommand(msg)
	if cmd == "" {
		cmd = scriptLineCommand(msg)
	}
	if cmd == "" {
		return "Redis ACL denies a command leasectl needs: " + msg + grant
	}
	where := ""
	if strings.Contains(lower, "script") {
		where = ", which leasectl's Lua scripts run"
	}
	return fmt.Sprintf("Redis ACL denies the %s command%s: grant the user +%s%s", strings.ToUpper(cmd), where, strings.ToLower(cmd), grant)
}

// quotedCommand is the command a NOPERM reply names: "... no permissions to
// run the 'time' command".
func quotedCommand(msg string) string {
	_, rest, ok := strings.Cut(msg, "run the '")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, "'")
	return name
}

// scriptLineCommand is the command at the script line a refusal inside a
// script points to: "script: <sha>, on @user_script:<line>.".
func scriptLineCommand(msg string) string {
	_, rest, ok := strings.Cut(msg, "script: ")
	if !ok {
		return ""
	}
	sha, rest, _ := strings.Cut(rest, ",")
	_, line, ok := strings.Cut(rest, "@user_script:")
	if !ok {
		return ""
	}
	n, err := strconv.Atoi(strings.TrimRight(line, ". "))
	if err != nil {
		return ""
	}
	return scriptCommand(strings.TrimSpace(sha), n)
}
