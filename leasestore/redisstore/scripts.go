package redisstore

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
)

//go:embed lua/lib.lua
var luaLib string

//go:embed lua/runs.lua
var luaRuns string

//go:embed lua/queue.lua
var luaQueue string

//go:embed lua/acquire.lua
var luaAcquire string

//go:embed lua/renew.lua
var luaRenew string

//go:embed lua/release.lua
var luaRelease string

//go:embed lua/recordlate.lua
var luaRecordLate string

//go:embed lua/scan.lua
var luaScan string

//go:embed lua/quarantine.lua
var luaQuarantine string

//go:embed lua/unquarantine.lua
var luaUnquarantine string

//go:embed lua/stop.lua
var luaStop string

//go:embed lua/expect.lua
var luaExpect string

//go:embed lua/overdue.lua
var luaOverdue string

//go:embed lua/jobs.lua
var luaJobs string

//go:embed lua/status.lua
var luaStatus string

//go:embed lua/checktoken.lua
var luaCheckToken string

//go:embed lua/leases.lua
var luaLeases string

//go:embed lua/quarantined.lua
var luaQuarantined string

//go:embed lua/counts.lua
var luaCounts string

//go:embed lua/sync.lua
var luaSync string

//go:embed lua/leave.lua
var luaLeave string

// One script per transition, run with EVALSHA (falling back to EVAL when
// the server lost its script cache, e.g. after a restart). Each is built on
// first use: hashing all of them at start-up would cost every leasectl
// process, the watchdog included, for the one or two a command runs.
var (
	scriptAcquire      = newScript(luaAcquire)
	scriptRenew        = newScript(luaRenew)
	scriptRelease      = newScript(luaRelease)
	scriptRecordLate   = newScript(luaRecordLate)
	scriptScan         = newScript(luaScan)
	scriptQuarantine   = newScript(luaQuarantine)
	scriptUnquarantine = newScript(luaUnquarantine)
	scriptStop         = newScript(luaStop)
	scriptExpect       = newScript(luaExpect)
	scriptOverdue      = newScript(luaOverdue)
	scriptJobs         = newScript(luaJobs)
	scriptStatus       = newScript(luaStatus)
	scriptCheckToken   = newScript(luaCheckToken)
	scriptLeases       = newScript(luaLeases)
	scriptQuarantined  = newScript(luaQuarantined)
	scriptCounts       = newScript(luaCounts)
	scriptSync         = newScript(luaSync)
	scriptLeave        = newScript(luaLeave)
)

// newScript returns the script made of the shared helpers (lib.lua, then
// the queue and the runs of a job: queue.lua, runs.lua) and body, built
// (and its SHA1 computed) once, on first use.
func newScript(body string) func() *redis.Script {
	return sync.OnceValue(func() *redis.Script {
		src := fmt.Sprintf("local HISTORY_LIMIT = %d\n", leasestore.HistoryLimit) + luaLib + luaQueue + luaRuns + body
		sc := redis.NewScript(src)
		sources.Store(sc.Hash(), src)
		return sc
	})
}

// sources maps the SHA1 of every script built so far to its source, so that
// an error Redis reports at a line of a script can name the command there.
var sources sync.Map

// scriptCommand returns the Redis command that line n (from 1) of the
// script whose SHA1 is sha calls, or "" when that is not known.
func scriptCommand(sha string, n int) string {
	src, ok := sources.Load(sha)
	if !ok || n < 1 {
		return ""
	}
	lines := strings.Split(src.(string), "\n")
	if n > len(lines) {
		return ""
	}
	_, call, ok := strings.Cut(lines[n-1], "redis.call('")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(call, "'")
	return name
}
